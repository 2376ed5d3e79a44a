//! What a component's conversion says of one tideway.io object given as JSON (a manifest, or
//! what the API server returns): the objects the operator and the agents convert, by kind.

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::bgp::{
    BFDProfile, BGPAdvertisement, BGPPeer, Community, Source, bfd_profile, bgp_advertisement, bgp_peer,
    community_aliases,
};
use super::load_balancer_pool::{LoadBalancerPool, load_balancer_pool};
use super::proxy_config::{ProxyConfig, proxy_config};
use crate::error::ConvertError;

/// The kinds `check` converts.
pub const CHECKED_KINDS: [&str; 6] =
    ["ProxyConfig", "LoadBalancerPool", "BGPPeer", "BGPAdvertisement", "BFDProfile", "Community"];

/// Converts `object` as the component reading its kind would; the error names the field.
pub fn check(object: &Value) -> Result<(), ConvertError> {
    match object["kind"].as_str().unwrap_or_default() {
        "ProxyConfig" => proxy_config(&decode::<ProxyConfig>(object)?).map(drop),
        "LoadBalancerPool" => load_balancer_pool(&decode::<LoadBalancerPool>(object)?).map(drop),
        "BGPPeer" => {
            let o = decode::<BGPPeer>(object)?;
            bgp_peer(Source::Tideway, &o.metadata, &o.spec).map(drop)
        }
        "BGPAdvertisement" => {
            let o = decode::<BGPAdvertisement>(object)?;
            bgp_advertisement(Source::Tideway, &o.metadata, &o.spec).map(drop)
        }
        "BFDProfile" => {
            let o = decode::<BFDProfile>(object)?;
            bfd_profile(Source::Tideway, &o.metadata, &o.spec).map(drop)
        }
        "Community" => {
            let o = decode::<Community>(object)?;
            community_aliases(Source::Tideway, &o.metadata, &o.spec).map(drop)
        }
        other => Err(refusal(object, "kind", format!("{other:?} is not one of {CHECKED_KINDS:?}"))),
    }
}

fn decode<T: DeserializeOwned>(object: &Value) -> Result<T, ConvertError> {
    serde_json::from_value(object.clone()).map_err(|e| refusal(object, "", format!("does not decode: {e}")))
}

fn refusal(object: &Value, field: &str, message: String) -> ConvertError {
    ConvertError {
        kind: "object",
        object: object["metadata"]["name"].as_str().unwrap_or_default().to_string(),
        field: field.to_string(),
        message,
    }
}
