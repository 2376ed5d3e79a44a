//! Schema overrides: fields that are plain strings in Rust (so an old or hand-edited object
//! still decodes and is reported by the converter) but enums in the CRD (so the API server
//! rejects a typo at write time).

use schemars::{Schema, SchemaGenerator, json_schema};

fn string_enum(values: &[&str]) -> Schema {
    json_schema!({ "type": "string", "enum": values, "nullable": true })
}

pub(crate) fn proxy_mode(_: &mut SchemaGenerator) -> Schema {
    string_enum(&["nftables", "iptables", "ipvs"])
}

pub(crate) fn detect_local_mode(_: &mut SchemaGenerator) -> Schema {
    string_enum(&["ClusterCIDR", "NodeCIDR"])
}

pub(crate) fn ipvs_scheduler(_: &mut SchemaGenerator) -> Schema {
    string_enum(&["rr", "wrr", "lc", "wlc", "lblc", "lblcr", "sh", "dh", "sed", "nq", "mh"])
}

/// RFC 3339 timestamps (`metav1.Time`).
pub(crate) fn date_time(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "string", "format": "date-time", "nullable": true })
}

/// A map of string to int64 (`programmedServices`).
pub(crate) fn generation_map(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "additionalProperties": { "type": "integer", "format": "int64" }
    })
}
