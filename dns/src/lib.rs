//! Tideway cluster DNS.

#![forbid(unsafe_code)]

pub mod answer;
pub mod cli;
pub mod config;
pub mod forward;
pub mod handler;
pub mod metrics;
pub mod ops;
pub mod records;
pub mod server;
mod udp;
