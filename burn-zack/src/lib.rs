//! # burn-zack
//!
//! ZACK (SVD rotations of K/V folded into the weights, adaptive per-head ranks).
//!
//! **Status: not implemented yet.** This crate is an empty placeholder in the workspace so that
//! the dependency graph of the design is in place; it exports nothing. The work is tracked in
//! issue 5.
