//! Tideway cluster DNS (in progress).

#![forbid(unsafe_code)]

pub mod cli;
