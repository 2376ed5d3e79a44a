//! Tideway cluster DNS.

#![forbid(unsafe_code)]

pub mod answer;
pub mod cli;
pub mod records;
