//! ClientIP affinity across a full apply. A full apply recreates the table, and with it the
//! per-endpoint affinity sets the packet path fills (a client, and when its affinity ends):
//! without more, every client would lose its endpoint at each full sync (hourly, and on every
//! restart). So the clients are read before the apply and written back, with what is left of
//! their timeouts, into the sets of the same name the new table declares (the timeout is part
//! of the name, so the same name means the same set; a set the new program lacks, an endpoint
//! gone, takes its clients with it).

use std::collections::HashMap;

use tideway_core::net::IpFamily;
use tideway_core::render::nftables::TABLE;

use super::batch::{Batch, NLM_F_CREATE, msg};
use super::objects::{TABLE_NAME, nfproto};
use super::read::{
    GETSET, GETSETELEM, NEWSET, NEWSETELEM, SET_TIMEOUT, be32, body, inner_value, is_missing, string,
};
use super::sets::attr;
use super::socket::NftNetlink;
use crate::dataplane::backend::DataplaneError;
use crate::netlink::{Attrs, attrs};

/// `NFTA_SET_ELEM_EXPIRATION`: milliseconds left.
const ELEM_EXPIRATION: u16 = 5;
/// Elements per message (well within a message's 64 KiB element list).
const PER_MESSAGE: usize = 1024;

/// A client of an affinity set: its key as the kernel holds it, and the milliseconds left.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Client {
    /// The key's bytes (the client's address).
    pub key: Vec<u8>,
    /// Milliseconds until its affinity ends.
    pub expires_ms: u64,
}

/// Per family (`NFPROTO_*`), per set name: the clients it held.
pub type Clients = HashMap<u8, HashMap<String, Vec<Client>>>;

/// Whether `name` is one of the sets the packet path fills with clients.
fn is_affinity(name: &str) -> bool {
    name.starts_with("affinity")
}

impl NftNetlink {
    /// The clients every affinity set of both families holds now (none where the table is
    /// missing).
    pub fn affinity_clients(&mut self) -> Result<Clients, DataplaneError> {
        let mut all = Clients::new();
        for f in IpFamily::ALL {
            let fam = nfproto(f);
            let table = Attrs::default().string(TABLE_NAME, TABLE);
            let sets = self.dump_all(GETSET, fam, &table, "reading sets", Vec::new, |acc, kind, p| {
                if kind != NEWSET {
                    return;
                }
                let (mut name, mut flags) = (String::new(), 0);
                for (ty, v) in attrs(body(p)) {
                    match ty {
                        attr::SET_NAME => name = string(v),
                        attr::SET_FLAGS => flags = be32(v),
                        _ => {}
                    }
                }
                if flags & SET_TIMEOUT != 0 && is_affinity(&name) {
                    acc.push(name);
                }
            });
            let sets = match sets {
                Ok(s) => s,
                Err(e) if is_missing(&e) => continue,
                Err(e) => return Err(e),
            };
            for set in sets {
                let a =
                    Attrs::default().string(attr::ELEM_LIST_TABLE, TABLE).string(attr::ELEM_LIST_SET, &set);
                let what = format!("reading the clients of {set}");
                let clients = self.dump_all(GETSETELEM, fam, &a, &what, Vec::new, |acc, kind, p| {
                    if kind == NEWSETELEM {
                        acc.extend(parse_clients(body(p)));
                    }
                })?;
                if !clients.is_empty() {
                    all.entry(fam).or_default().insert(set, clients);
                }
            }
        }
        Ok(all)
    }
}

fn parse_clients(body: &[u8]) -> Vec<Client> {
    let Some((_, list)) = attrs(body).find(|(t, _)| *t == attr::ELEM_LIST_ELEMENTS) else {
        return Vec::new();
    };
    attrs(list)
        .filter_map(|(_, elem)| {
            let mut c = Client { key: Vec::new(), expires_ms: 0 };
            for (t, v) in attrs(elem) {
                match t {
                    attr::ELEM_KEY => c.key = inner_value(v).to_vec(),
                    ELEM_EXPIRATION if v.len() == 8 => {
                        c.expires_ms = u64::from_be_bytes(v.try_into().unwrap_or_default());
                    }
                    _ => {}
                }
            }
            // One about to expire is let go rather than written back with nothing left.
            (!c.key.is_empty() && c.expires_ms > 0).then_some(c)
        })
        .collect()
}

/// Adds `clients` to set `name` (declared in this batch as `set_id`), each with the time it
/// had left.
pub(super) fn restore(b: &mut Batch, fam: u8, name: &str, set_id: u32, clients: &[Client]) {
    for chunk in clients.chunks(PER_MESSAGE) {
        b.message(msg::NEWSETELEM, fam, NLM_F_CREATE, format!("restore the clients of {name}"));
        b.str(attr::ELEM_LIST_TABLE, TABLE);
        b.str(attr::ELEM_LIST_SET, name);
        b.be32(attr::ELEM_LIST_SET_ID, set_id);
        let list = b.nest(attr::ELEM_LIST_ELEMENTS);
        for (i, c) in chunk.iter().enumerate() {
            let e = b.nest(u16::try_from(i + 1).unwrap_or(u16::MAX));
            let k = b.nest(attr::ELEM_KEY);
            b.put(attr::DATA_VALUE, &c.key);
            b.end(k);
            b.be64(ELEM_EXPIRATION, c.expires_ms);
            b.end(e);
        }
        b.end(list);
    }
}
