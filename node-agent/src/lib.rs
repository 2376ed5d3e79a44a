//! Tideway node agent (in progress).

#![forbid(unsafe_code)]

pub mod cli;
