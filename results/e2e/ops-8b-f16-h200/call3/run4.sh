#!/usr/bin/env bash
# Call 3 (two GPUs, the same machine as call 2): HEAD b2a2875's one-request-at-a-time sweep
# (run2.sh with BINS=head-disagg), then this build with 5 requests arriving at 0.1 and 0.125
# per second (run2.sh with --request-rate).
H=.gpu/ops
BINS=head-disagg LIMIT=270 bash $H/run2.sh
mkdir -p $OUT/rates
OUT=$OUT/rates BINS=disagg REQUESTS=5 EXTRA="--request-rate 0.1,0.125" LIMIT=290 bash $H/run2.sh
