//! `discovery.k8s.io/v1/EndpointSlice` -> [`EndpointSlice`].

use k8s_openapi::api::discovery::v1 as k8s;
use tideway_core::model::{Endpoint, EndpointHints, EndpointPort, EndpointSlice, LABEL_SERVICE_NAME};
use tideway_core::net::IpFamily;

use crate::error::{ConvertError, Ctx};

/// When the change an EndpointSlice version reflects happened (set by the EndpointSlice
/// controller; an unreadable value is ignored, as kube-proxy does).
pub const ANNOTATION_TRIGGER_TIME: &str = "endpoints.kubernetes.io/last-change-trigger-time";

/// Converts an EndpointSlice. `Ok(None)` for slices proxies ignore: FQDN slices and slices
/// that belong to no Service.
pub fn endpoint_slice(slice: &k8s::EndpointSlice) -> Result<Option<EndpointSlice>, ConvertError> {
    let meta = &slice.metadata;
    let name = meta.name.clone().unwrap_or_default();
    let namespace = meta.namespace.clone().unwrap_or_else(|| "default".into());
    let cx = Ctx::new("EndpointSlice", Some(&namespace), &name);
    if name.is_empty() {
        return Err(cx.err("metadata.name", "is required"));
    }
    let family = match slice.address_type.as_str() {
        "IPv4" => IpFamily::V4,
        "IPv6" => IpFamily::V6,
        "FQDN" => return Ok(None),
        other => return Err(cx.err("addressType", format!("unknown address type {other:?}"))),
    };
    let mut labels = meta.labels.clone().unwrap_or_default();
    // The Service's name becomes `service`; the map keeps the other labels (usually none: an
    // empty map holds no allocation, a map of one a whole tree node).
    let Some(service) = labels.remove(LABEL_SERVICE_NAME) else {
        return Ok(None);
    };
    let mut ports = Vec::with_capacity(slice.ports.as_ref().map_or(0, Vec::len));
    for (i, p) in slice.ports.iter().flatten().enumerate() {
        // A port without a number carries no traffic (kube-proxy skips it).
        let Some(n) = p.port else { continue };
        ports.push(EndpointPort {
            name: p.name.clone().unwrap_or_default(),
            protocol: cx.protocol(format!("ports[{i}].protocol"), p.protocol.as_deref())?,
            port: cx.port(format!("ports[{i}].port"), n)?,
        });
    }
    // Vectors sized exactly: a slice's endpoints live as long as it does, and growth by
    // doubling would leave up to half of each vector unused (tens of MiB at 100,000 Services).
    let mut endpoints = Vec::with_capacity(slice.endpoints.len());
    for (i, ep) in slice.endpoints.iter().enumerate() {
        let mut addresses = Vec::with_capacity(ep.addresses.len());
        for (j, a) in ep.addresses.iter().enumerate() {
            let f = format!("endpoints[{i}].addresses[{j}]");
            let ip = cx.ip(&f, a)?;
            if IpFamily::of(&ip) != family {
                return Err(
                    cx.err(f, format!("{a} is not an {family} address (addressType {})", slice.address_type))
                );
            }
            addresses.push(ip);
        }
        let cond = ep.conditions.clone().unwrap_or_default();
        // discovery/v1: nil ready means ready; nil serving means "same as ready".
        let ready = cond.ready.unwrap_or(true);
        let hints = ep.hints.clone().unwrap_or_default();
        let mut out = Endpoint::at(addresses.into());
        out.ready = ready;
        out.serving = cond.serving.unwrap_or(ready);
        out.terminating = cond.terminating.unwrap_or(false);
        out.node_name = ep.node_name.as_deref().map(Into::into);
        out.pod_name = ep
            .target_ref
            .as_ref()
            .filter(|r| r.kind.as_deref() == Some("Pod"))
            .and_then(|r| r.name.as_deref())
            .map(Into::into);
        out.set_hostname(ep.hostname.as_deref().map(Into::into));
        out.set_zone(ep.zone.as_deref().map(Into::into));
        out.set_hints(Some(endpoint_hints(hints)));
        endpoints.push(out);
    }
    let trigger_time = meta
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_TRIGGER_TIME))
        .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok())
        .map(std::time::SystemTime::from);
    Ok(Some(EndpointSlice { namespace, name, service, family, ports, endpoints, labels, trigger_time }))
}

/// An endpoint's hints (empty when it has none).
fn endpoint_hints(hints: k8s::EndpointHints) -> EndpointHints {
    let for_zones: Vec<String> = hints.for_zones.into_iter().flatten().map(|z| z.name).collect();
    let for_nodes: Vec<String> = hints.for_nodes.into_iter().flatten().map(|n| n.name).collect();
    EndpointHints { for_zones, for_nodes }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use super::*;

    fn slice(trigger: Option<&str>) -> k8s::EndpointSlice {
        let mut annotations = serde_json::Map::new();
        if let Some(t) = trigger {
            annotations.insert(ANNOTATION_TRIGGER_TIME.into(), t.into());
        }
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web-1", "namespace": "demo", "annotations": annotations,
                         "labels": {"kubernetes.io/service-name": "web"}},
            "addressType": "IPv4", "endpoints": [{"addresses": ["10.0.0.1"]}],
        }))
        .unwrap()
    }

    #[test]
    fn the_trigger_time_annotation_is_read() {
        let s = endpoint_slice(&slice(Some("2026-11-23T10:00:00Z"))).unwrap().unwrap();
        assert_eq!(s.trigger_time, Some(SystemTime::UNIX_EPOCH + Duration::from_secs(1_795_428_000)));
        assert_eq!(endpoint_slice(&slice(Some("yesterday"))).unwrap().unwrap().trigger_time, None);
        assert_eq!(endpoint_slice(&slice(None)).unwrap().unwrap().trigger_time, None);
    }

    #[test]
    fn the_service_name_label_becomes_the_service_and_other_labels_stay() {
        let mut k = slice(None);
        k.metadata
            .labels
            .get_or_insert_default()
            .insert(tideway_core::model::LABEL_HEADLESS.into(), String::new());
        let s = endpoint_slice(&k).unwrap().unwrap();
        assert_eq!(s.service, "web");
        assert_eq!(s.labels.keys().collect::<Vec<_>>(), [tideway_core::model::LABEL_HEADLESS]);
        let plain = endpoint_slice(&slice(None)).unwrap().unwrap();
        assert!(plain.labels.is_empty(), "{:?}", plain.labels);
    }
}
