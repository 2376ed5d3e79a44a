//! What is forwarded: a question and who asks it.

use std::net::IpAddr;

use hickory_proto::rr::{DNSClass, LowerName, Name, RecordType};

use super::cache::CacheKey;

/// A question to forward, and who asks it.
#[derive(Debug, Clone)]
pub struct Question {
    /// Query name (the asker's case).
    pub name: Name,
    /// Query type.
    pub qtype: RecordType,
    /// Query class.
    pub qclass: DNSClass,
    /// DNSSEC OK bit of the asker's query.
    pub dnssec_ok: bool,
    /// The asker's address (its share of the slots).
    pub client: IpAddr,
}

impl Question {
    /// What its answer is cached and shared by.
    pub fn key(&self) -> CacheKey {
        CacheKey {
            name: LowerName::new(&self.name),
            qtype: self.qtype,
            qclass: self.qclass,
            dnssec_ok: self.dnssec_ok,
        }
    }
}
