//! BGP objects with MetalLB's kinds and field names: `BGPPeer`, `BGPAdvertisement`,
//! `BFDProfile` and `Community`, as Tideway CRDs (`tideway.io/v1alpha1`, cluster-scoped) and,
//! for users moving over, read from MetalLB's own objects as they are (`metallb.io`, `BGPPeer`
//! in `v1beta2`, the others in `v1beta1`). Both convert here, once, into [`tideway_core::bgp`].
//!
//! A field MetalLB has and Tideway cannot honour yet (`dynamicASN`, unnumbered `interface`
//! peering, `vrf`, `routerID`, `enableGracefulRestart`, pool and Service selectors on an
//! advertisement) refuses the object, naming the field: programming a session or a route other
//! than the one asked for would be worse than none. `connectTime`, `disableMP` and
//! `dualStackAddressFamily` change nothing Tideway does and are ignored.

pub(super) mod object;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use tideway_core::bgp::{
    BadCommunity, BfdProfile as CoreBfd, BgpAdvertisement as CoreAdvertisement, BgpPeer as CorePeer,
    CommunityAlias as CoreAlias,
};

use super::load_balancer_pool::selectors;
use super::schema::Constraint;
use crate::duration::parse_duration;
use crate::error::{ConvertError, Ctx};
use crate::validation::duration_text;

/// `BGPPeer.spec`: a BGP session the selected nodes open.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "tideway.io",
    version = "v1alpha1",
    kind = "BGPPeer",
    printcolumn = r#"{"name":"Address","type":"string","jsonPath":".spec.peerAddress"}"#,
    printcolumn = r#"{"name":"ASN","type":"integer","jsonPath":".spec.peerASN"}"#,
    printcolumn = r#"{"name":"BFD Profile","type":"string","jsonPath":".spec.bfdProfile"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct BGPPeerSpec {
    /// The ASN the node speaks.
    #[serde(rename = "myASN")]
    pub my_asn: u32,
    /// The ASN the peer must have.
    #[serde(default, rename = "peerASN", skip_serializing_if = "Option::is_none")]
    pub peer_asn: Option<u32>,
    /// MetalLB's `internal` / `external` instead of a peer ASN: not supported (refused).
    #[serde(default, rename = "dynamicASN", skip_serializing_if = "Option::is_none")]
    pub dynamic_asn: Option<String>,
    /// The address to dial.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer_address: Option<String>,
    /// Unnumbered peering over an interface: not supported (refused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interface: Option<String>,
    /// The node address the session starts from (default: the kernel's choice).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_address: Option<String>,
    /// The port to dial (default 179).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer_port: Option<u16>,
    /// BGP hold time (default `90s`; `0s`, or at least `3s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold_time: Option<String>,
    /// BGP keepalive interval (default a third of the hold time; below the hold time).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keepalive_time: Option<String>,
    /// The router ID to send: not supported (refused; FRR takes the node's).
    #[serde(default, rename = "routerID", skip_serializing_if = "Option::is_none")]
    pub router_id: Option<String>,
    /// Nodes that open this session, by label (empty: every node).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_selectors: Vec<LabelSelector>,
    /// TCP MD5 password, written here (or `passwordSecret`, not both).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
    /// A `kubernetes.io/basic-auth` Secret whose `password` key holds it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_secret: Option<SecretReference>,
    /// The `BFDProfile` guarding the session (absent: no BFD).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bfd_profile: Option<String>,
    /// Graceful restart: not supported (refused when true).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub enable_graceful_restart: bool,
    /// The peer is more than one hop away.
    #[serde(default, rename = "ebgpMultiHop", skip_serializing_if = "std::ops::Not::not")]
    pub ebgp_multihop: bool,
    /// A host VRF to peer in: not supported (refused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vrf: Option<String>,
}

/// A Secret by name (MetalLB's `passwordSecret`); it must be in Tideway's own namespace.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct SecretReference {
    /// The Secret's name.
    #[serde(default)]
    pub name: String,
    /// Its namespace (absent: Tideway's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

/// `BGPAdvertisement.spec`: how pools' addresses are advertised.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(group = "tideway.io", version = "v1alpha1", kind = "BGPAdvertisement")]
#[serde(rename_all = "camelCase")]
pub struct BGPAdvertisementSpec {
    /// The prefix length IPv4 addresses are advertised under (default 32).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aggregation_length: Option<i32>,
    /// The prefix length IPv6 addresses are advertised under (default 128).
    #[serde(default, rename = "aggregationLengthV6", skip_serializing_if = "Option::is_none")]
    pub aggregation_length_v6: Option<i32>,
    /// LOCAL_PREF, sent to iBGP peers only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_pref: Option<u32>,
    /// Communities: `65535:65282`, `large:1:2:3`, or the name of one a `Community` defines.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub communities: Vec<String>,
    /// Pools by name (none named: every pool).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ip_address_pools: Vec<String>,
    /// Pools by label: not supported (refused; name the pools).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ip_address_pool_selectors: Vec<LabelSelector>,
    /// Nodes that advertise, by label (empty: every node).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_selectors: Vec<LabelSelector>,
    /// `BGPPeer`s to advertise to, by name (empty: every peer).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub peers: Vec<String>,
    /// Services by label: not supported (refused).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub service_selectors: Vec<LabelSelector>,
}

/// `BFDProfile.spec`: BFD timers for the sessions that name it (intervals in milliseconds).
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(group = "tideway.io", version = "v1alpha1", kind = "BFDProfile")]
#[serde(rename_all = "camelCase")]
pub struct BFDProfileSpec {
    /// The slowest rate this end accepts control packets at, ms (10–60000, default 300).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receive_interval: Option<u32>,
    /// The fastest rate this end sends them at, ms (10–60000, default 300).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transmit_interval: Option<u32>,
    /// Packets lost before the session is down (2–255, default 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detect_multiplier: Option<u32>,
    /// Echo packets' interval, ms (10–60000, default 50).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub echo_interval: Option<u32>,
    /// Send echo packets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub echo_mode: Option<bool>,
    /// Wait for the peer to start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub passive_mode: Option<bool>,
    /// The lowest TTL accepted on multi-hop sessions (1–254, default 254).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub minimum_ttl: Option<u32>,
}

/// `Community.spec`: names for community values.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(group = "tideway.io", version = "v1alpha1", kind = "Community")]
#[serde(rename_all = "camelCase")]
pub struct CommunitySpec {
    /// The names and their values.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub communities: Vec<CommunityAlias>,
}

/// One named community value.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct CommunityAlias {
    /// The name advertisements use.
    pub name: String,
    /// `65535:65282` or `large:1:2:3` (required: an empty default would break its own pattern,
    /// which the API server refuses in the CRD itself).
    pub value: String,
}

/// Whose object is converted: Tideway's (cluster-scoped) or MetalLB's (namespaced, read as it
/// is). Errors name the kind and object accordingly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// `tideway.io/v1alpha1`.
    Tideway,
    /// `metallb.io`.
    MetalLb,
}

impl Source {
    fn cx(self, kind: &'static str, meta: &ObjectMeta) -> (Ctx, String) {
        let name = meta.name.clone().unwrap_or_default();
        let cx = match self {
            Source::Tideway => Ctx::new(kind, None, &name),
            Source::MetalLb => Ctx::new(kind, Some(meta.namespace.as_deref().unwrap_or("default")), &name),
        };
        (cx, name)
    }
}

/// Bounds MetalLB's webhooks and FRR apply.
pub(crate) mod limits {
    /// BFD intervals, ms.
    pub(crate) const BFD_INTERVAL: (u32, u32) = (10, 60_000);
    /// BFD detect multiplier.
    pub(crate) const BFD_MULTIPLIER: (u32, u32) = (2, 255);
    /// BFD minimum TTL.
    pub(crate) const BFD_TTL: (u32, u32) = (1, 254);
    /// The shortest non-zero hold time, s (RFC 4271).
    pub(crate) const MIN_HOLD_TIME: u32 = 3;
    /// The longest hold time, s (a 16-bit field).
    pub(crate) const MAX_HOLD_TIME: u32 = 65_535;
}

/// Whole seconds of the duration at `field` (`90s`, `1m30s`), at most `max`.
fn seconds(cx: &Ctx, field: &str, text: &str, max: u32) -> Result<u32, ConvertError> {
    let d = parse_duration(text).map_err(|e| cx.err(field, e.to_string()))?;
    if d.subsec_nanos() != 0 {
        return Err(cx.err(field, format!("{text:?} is not a whole number of seconds")));
    }
    u32::try_from(d.as_secs())
        .ok()
        .filter(|s| *s <= max)
        .ok_or_else(|| cx.err(field, format!("{text:?} is longer than {max}s")))
}

/// Refuses a field Tideway cannot honour.
fn unsupported(cx: &Ctx, field: &str, set: bool) -> Result<(), ConvertError> {
    if set {
        return Err(cx.err(
            field,
            "is not supported by Tideway: the object is refused rather than programmed otherwise",
        ));
    }
    Ok(())
}

/// Converts a `BGPPeer`.
pub fn bgp_peer(source: Source, meta: &ObjectMeta, s: &BGPPeerSpec) -> Result<CorePeer, ConvertError> {
    let (cx, name) = source.cx("BGPPeer", meta);
    let name = name.as_str();
    unsupported(&cx, "spec.dynamicASN", s.dynamic_asn.is_some())?;
    unsupported(&cx, "spec.interface", s.interface.is_some())?;
    unsupported(&cx, "spec.vrf", s.vrf.as_deref().is_some_and(|v| !v.is_empty()))?;
    unsupported(&cx, "spec.routerID", s.router_id.is_some())?;
    unsupported(&cx, "spec.enableGracefulRestart", s.enable_graceful_restart)?;
    let peer_asn = s.peer_asn.ok_or_else(|| cx.err("spec.peerASN", "is required"))?;
    let address = s.peer_address.as_deref().ok_or_else(|| cx.err("spec.peerAddress", "is required"))?;
    let mut peer = CorePeer::new(name, s.my_asn, peer_asn, cx.ip("spec.peerAddress", address)?);
    if s.my_asn == 0 || peer_asn == 0 {
        let field = if s.my_asn == 0 { "spec.myASN" } else { "spec.peerASN" };
        return Err(cx.err(field, "must be an AS number from 1 to 4294967295"));
    }
    if let Some(port) = s.peer_port {
        peer.port = cx.port("spec.peerPort", i32::from(port))?;
    }
    peer.source_address = s.source_address.as_deref().map(|a| cx.ip("spec.sourceAddress", a)).transpose()?;
    if let Some(hold) = &s.hold_time {
        peer.hold_time = seconds(&cx, "spec.holdTime", hold, limits::MAX_HOLD_TIME)?;
        if (1..limits::MIN_HOLD_TIME).contains(&peer.hold_time) {
            return Err(cx.err("spec.holdTime", format!("must be 0s or at least {}s", limits::MIN_HOLD_TIME)));
        }
    }
    if let Some(keepalive) = &s.keepalive_time {
        let k = seconds(&cx, "spec.keepaliveTime", keepalive, limits::MAX_HOLD_TIME)?;
        if peer.hold_time != 0 && k >= peer.hold_time {
            return Err(cx.err(
                "spec.keepaliveTime",
                format!("must be shorter than the hold time ({}s)", peer.hold_time),
            ));
        }
        peer.keepalive_time = Some(k);
    }
    peer.node_selectors = selectors(&cx, "spec.nodeSelectors", &s.node_selectors)?;
    peer.password = s.password.clone().filter(|p| !p.is_empty());
    if let Some(why) = peer.password.as_deref().and_then(tideway_core::bgp::password_problem) {
        return Err(cx.err("spec.password", why));
    }
    peer.password_secret = s.password_secret.as_ref().map(|r| r.name.clone()).filter(|n| !n.is_empty());
    if peer.password.is_some() && peer.password_secret.is_some() {
        return Err(cx.err("spec.passwordSecret", "cannot be given with spec.password: choose one"));
    }
    peer.bfd_profile = s.bfd_profile.clone().filter(|p| !p.is_empty());
    peer.ebgp_multihop = s.ebgp_multihop;
    Ok(peer)
}

/// Converts a `BFDProfile`, with MetalLB's defaults and bounds.
pub fn bfd_profile(source: Source, meta: &ObjectMeta, s: &BFDProfileSpec) -> Result<CoreBfd, ConvertError> {
    let (cx, name) = source.cx("BFDProfile", meta);
    let within = |field: &str, v: Option<u32>, default: u32, (lo, hi): (u32, u32)| match v {
        None => Ok(default),
        Some(v) if (lo..=hi).contains(&v) => Ok(v),
        Some(v) => Err(cx.err(field, format!("{v} is out of range {lo}-{hi}"))),
    };
    let d = CoreBfd::new(&name);
    Ok(CoreBfd {
        receive_interval: within(
            "spec.receiveInterval",
            s.receive_interval,
            d.receive_interval,
            limits::BFD_INTERVAL,
        )?,
        transmit_interval: within(
            "spec.transmitInterval",
            s.transmit_interval,
            d.transmit_interval,
            limits::BFD_INTERVAL,
        )?,
        detect_multiplier: within(
            "spec.detectMultiplier",
            s.detect_multiplier,
            d.detect_multiplier,
            limits::BFD_MULTIPLIER,
        )?,
        echo_interval: within("spec.echoInterval", s.echo_interval, d.echo_interval, limits::BFD_INTERVAL)?,
        echo_mode: s.echo_mode.unwrap_or(d.echo_mode),
        passive_mode: s.passive_mode.unwrap_or(d.passive_mode),
        minimum_ttl: u8::try_from(within(
            "spec.minimumTtl",
            s.minimum_ttl,
            u32::from(d.minimum_ttl),
            limits::BFD_TTL,
        )?)
        .unwrap_or(d.minimum_ttl),
        ..d
    })
}

/// The names a `Community` defines, each value checked.
pub fn community_aliases(
    source: Source,
    meta: &ObjectMeta,
    s: &CommunitySpec,
) -> Result<Vec<CoreAlias>, ConvertError> {
    let (cx, _) = source.cx("Community", meta);
    let mut out: Vec<CoreAlias> = Vec::new();
    for (i, alias) in s.communities.iter().enumerate() {
        let field = |f: &str| format!("spec.communities[{i}].{f}");
        if alias.name.is_empty() {
            return Err(cx.err(field("name"), "is required"));
        }
        let value = alias.value.parse().map_err(|e: BadCommunity| cx.err(field("value"), e.to_string()))?;
        if out.iter().any(|a| a.name == alias.name) {
            return Err(cx.err(field("name"), format!("{:?} is defined twice", alias.name)));
        }
        out.push(CoreAlias { name: alias.name.clone(), value });
    }
    Ok(out)
}

/// Converts a `BGPAdvertisement`. A community that is no value is the name of one a
/// `Community` defines, looked up when the nodes decide.
pub fn bgp_advertisement(
    source: Source,
    meta: &ObjectMeta,
    s: &BGPAdvertisementSpec,
) -> Result<CoreAdvertisement, ConvertError> {
    let (cx, name) = source.cx("BGPAdvertisement", meta);
    unsupported(&cx, "spec.ipAddressPoolSelectors", !s.ip_address_pool_selectors.is_empty())?;
    unsupported(&cx, "spec.serviceSelectors", !s.service_selectors.is_empty())?;
    let mut ad = CoreAdvertisement::new(&name);
    let length = |field: &str, v: Option<i32>, max: u8| match v {
        None => Ok(max),
        Some(v) => u8::try_from(v)
            .ok()
            .filter(|l| *l <= max)
            .ok_or_else(|| cx.err(field, format!("{v} is out of range 0-{max}"))),
    };
    ad.aggregation_length = length("spec.aggregationLength", s.aggregation_length, 32)?;
    ad.aggregation_length_v6 = length("spec.aggregationLengthV6", s.aggregation_length_v6, 128)?;
    ad.local_pref = s.local_pref;
    for (i, text) in s.communities.iter().enumerate() {
        let c = text.parse().map_err(|e: BadCommunity| {
            cx.err(format!("spec.communities[{i}]"), format!("{e}, or the name of one a Community defines"))
        })?;
        ad.communities.push(c);
    }
    ad.pools = names(&cx, "spec.ipAddressPools", &s.ip_address_pools)?;
    ad.peers = names(&cx, "spec.peers", &s.peers)?;
    ad.node_selectors = selectors(&cx, "spec.nodeSelectors", &s.node_selectors)?;
    Ok(ad)
}

/// Object names at `field`, none empty.
fn names(cx: &Ctx, field: &str, list: &[String]) -> Result<Vec<String>, ConvertError> {
    crate::validation::max_items(cx, field, list, crate::validation::MAX_ALLOCATION_ENTRIES)?;
    if let Some(i) = list.iter().position(String::is_empty) {
        return Err(cx.err(format!("{field}[{i}]"), "is empty: a name is required"));
    }
    Ok(list.to_vec())
}

/// The bounds above, in each CRD's schema (the API server refuses what the agents would):
/// `BGPPeer`, `BGPAdvertisement`, `BFDProfile`, `Community`, in [`super::all`]'s order.
pub(crate) fn constraints() -> [Vec<Constraint>; 4] {
    let range = |(lo, hi): (u32, u32)| json!({"minimum": lo, "maximum": hi});
    let bfd = |path| Constraint { path, keywords: range(limits::BFD_INTERVAL) };
    [
        vec![
            Constraint { path: "spec.myASN", keywords: json!({"minimum": 1}) },
            Constraint { path: "spec.peerASN", keywords: json!({"minimum": 1}) },
            Constraint { path: "spec.peerPort", keywords: json!({"minimum": 1}) },
            Constraint { path: "spec.holdTime", keywords: duration_text() },
            Constraint { path: "spec.keepaliveTime", keywords: duration_text() },
        ],
        vec![
            Constraint { path: "spec.aggregationLength", keywords: json!({"minimum": 0, "maximum": 32}) },
            Constraint { path: "spec.aggregationLengthV6", keywords: json!({"minimum": 0, "maximum": 128}) },
        ],
        vec![
            bfd("spec.receiveInterval"),
            bfd("spec.transmitInterval"),
            bfd("spec.echoInterval"),
            Constraint { path: "spec.detectMultiplier", keywords: range(limits::BFD_MULTIPLIER) },
            Constraint { path: "spec.minimumTtl", keywords: range(limits::BFD_TTL) },
        ],
        vec![Constraint {
            path: "spec.communities[].value",
            keywords: json!({"pattern": COMMUNITY_PATTERN}),
        }],
    ]
}

/// `ASN:VALUE` or `large:GLOBAL:LOCAL1:LOCAL2` (digits; the conversion checks the ranges).
const COMMUNITY_PATTERN: &str = "^([0-9]{1,5}:[0-9]{1,5}|large:[0-9]{1,10}:[0-9]{1,10}:[0-9]{1,10})$";

#[cfg(test)]
mod tests;
