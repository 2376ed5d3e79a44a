//! nftables: everything in `table ip tideway` and `table ip6 tideway`, one netlink transaction
//! per sync (both families together), so a failed sync changes nothing.

use serde_json::Value;
use tideway_core::config::ProxyMode;
use tideway_core::net::IpFamily;
use tideway_core::program::Program;
use tideway_core::render::nftables::{TABLE, text};

use super::nft_netlink::NftNetlink;
use super::observe::Counts;
use super::{Dataplane, DataplaneError, Drift, Keep, Retired, Update};
use crate::exec;

/// The nftables backend: changes go over netlink in one transaction; reading back and
/// cleaning up use the `nft` tool.
#[derive(Default)]
pub struct Nftables {
    netlink: Option<NftNetlink>,
}

impl std::fmt::Debug for Nftables {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Nftables").field("connected", &self.netlink.is_some()).finish()
    }
}

impl Nftables {
    /// A backend using `nft` from `PATH`.
    pub fn new() -> Self {
        Nftables::default()
    }

    fn nft(args: &[&str], input: Option<&str>) -> Result<String, DataplaneError> {
        Ok(exec::run("nft", args, input)?)
    }

    fn tables() -> Result<Vec<String>, DataplaneError> {
        let out = Self::nft(&["list", "tables"], None)?;
        Ok(out.lines().map(|l| l.trim().to_string()).collect())
    }

    fn observe(family: IpFamily, deep: bool) -> Result<Option<Counts>, DataplaneError> {
        let fam = text::family_kw(family);
        let mut args = vec!["-j"];
        if !deep {
            args.push("-t");
        }
        args.extend(["list", "table", fam, TABLE]);
        let out = match Self::nft(&args, None) {
            Ok(out) => out,
            Err(DataplaneError::Command(e)) if e.stderr.contains("No such file") => return Ok(None),
            Err(e) => return Err(e),
        };
        let json: Value = serde_json::from_str(&out)
            .map_err(|e| DataplaneError::Parse { tool: "nft", message: format!("JSON: {e}") })?;
        let mut counts = Counts::default();
        for item in json.get("nftables").and_then(Value::as_array).into_iter().flatten() {
            if let Some(c) = item.get("chain") {
                let name = c.get("name").and_then(Value::as_str).unwrap_or_default().to_string();
                counts.chains.entry((TABLE.to_string(), name)).or_insert(0);
            } else if let Some(r) = item.get("rule") {
                let name = r.get("chain").and_then(Value::as_str).unwrap_or_default().to_string();
                *counts.chains.entry((TABLE.to_string(), name)).or_insert(0) += 1;
            } else if let Some(s) = item.get("set").or_else(|| item.get("map")) {
                let name = s.get("name").and_then(Value::as_str).unwrap_or_default().to_string();
                let members = s.get("elem").and_then(Value::as_array).map_or(0, Vec::len);
                counts.sets.insert((TABLE.to_string(), name), members);
            }
        }
        Ok(Some(counts))
    }
}

impl Dataplane for Nftables {
    fn mode(&self) -> ProxyMode {
        ProxyMode::Nftables
    }

    fn apply(&mut self, desired: [&Program; 2], update: Update<'_>) -> Result<(), DataplaneError> {
        if self.netlink.is_none() {
            self.netlink = Some(NftNetlink::open()?);
        }
        let nl = self.netlink.as_mut().expect("just opened");
        let result = match update {
            Update::Full => nl.apply_full(desired),
            Update::Changes(cs) => nl.apply_changes(desired, cs),
        };
        if result.is_err() {
            // A fresh socket for the retry (nothing of this transaction was applied).
            self.netlink = None;
        }
        result
    }

    fn verify(&mut self, desired: [&Program; 2], deep: bool) -> Result<Vec<Drift>, DataplaneError> {
        let mut drift = Vec::new();
        for p in desired {
            let label = format!("table {} {TABLE}", text::family_kw(p.family));
            match Self::observe(p.family, deep)? {
                None => drift.push(Drift { object: label, detail: "missing".into() }),
                Some(observed) => drift.extend(Counts::of(p).compare(&observed, deep, &label)),
            }
        }
        Ok(drift)
    }

    fn cleanup(&mut self, _keep: &Keep) -> Result<Retired, DataplaneError> {
        let tables = Self::tables()?;
        let mut script = String::new();
        for fam in ["ip", "ip6"] {
            if tables.iter().any(|t| *t == format!("table {fam} {TABLE}")) {
                script.push_str(&format!("delete table {fam} {TABLE}\n"));
            }
        }
        if !script.is_empty() {
            Self::nft(&["-f", "-"], Some(&script))?;
        }
        Ok(Retired::Done)
    }

    fn present(&mut self) -> Result<bool, DataplaneError> {
        let tables = Self::tables()?;
        Ok(tables.iter().any(|t| *t == format!("table ip {TABLE}") || *t == format!("table ip6 {TABLE}")))
    }
}
