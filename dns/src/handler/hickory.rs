//! The hickory-server adapter: [`DnsHandler`] implements `RequestHandler` over [`Core`].
//!
//! hickory-server parses the request and owns the connection; this converts the request into
//! a [`Step`], completes it, and hands the reply back as a hickory `MessageResponse`. The reply
//! is also fitted once with [`wire::encode`] to apply the same UDP truncation as the native
//! path and to measure the response size for the metrics.

use std::sync::Arc;
use std::time::Instant;

use hickory_proto::op::{Header, HeaderCounts, ResponseCode};
use hickory_server::net::runtime::Time;
use hickory_server::net::xfer::Protocol;
use hickory_server::server::{Request, RequestHandler, ResponseHandler, ResponseInfo};
use hickory_server::zone_handler::MessageResponseBuilder;

use tracing::Instrument;

use super::core::Core;
use super::reply::Reply;
use super::wire::{self, response_edns, response_metadata, udp_limit};
use crate::metrics::Proto;

/// hickory-server's view of the DNS server.
#[derive(Clone)]
pub struct DnsHandler {
    core: Arc<Core>,
}

impl DnsHandler {
    /// A handler over `core`.
    pub fn new(core: Arc<Core>) -> Self {
        DnsHandler { core }
    }
}

#[async_trait::async_trait]
impl RequestHandler for DnsHandler {
    async fn handle_request<R: ResponseHandler, T: Time>(
        &self,
        request: &Request,
        mut response_handle: R,
    ) -> ResponseInfo {
        let started = Instant::now();
        let proto = match request.protocol() {
            Protocol::Udp => Proto::Udp,
            _ => Proto::Tcp,
        };
        wire::record_request(&self.core, request, proto, request.as_slice().len());
        let span = wire::query_span(request, proto);
        let step = span.in_scope(|| self.core.decide(request));
        let reply = self.core.complete(step).instrument(span.clone()).await;
        wire::record_reply(&span, &reply);
        let limit = match proto {
            Proto::Udp => udp_limit(request),
            Proto::Tcp => u16::MAX,
        };
        let fitted = wire::encode(request, &reply, limit).ok();
        self.core.metrics().response(
            proto,
            request.queries.queries().first().map_or(hickory_proto::rr::RecordType::NULL, |q| q.query_type()),
            reply.rcode,
            reply.source,
            fitted.as_ref().map_or(0, |f| f.bytes.len()),
            started.elapsed().as_secs_f64(),
        );
        let edns = request.edns.as_ref().map(response_edns);
        let mut meta = response_metadata(request, &reply);
        let rebuilt = wire::reply_question(request);
        let builder =
            MessageResponseBuilder::new(rebuilt.as_ref().unwrap_or(&request.queries), edns.as_ref());
        let (body, truncated) = fitted.map_or((reply, false), |f| (f.reply, f.truncated));
        meta.truncation = truncated;
        let response = builder.build(
            meta,
            body.answers.iter(),
            body.authorities.iter(),
            std::iter::empty(),
            body.additionals.iter(),
        );
        match response_handle.send_response(response).await {
            Ok(info) => info,
            Err(e) => {
                tracing::debug!(error = %e, "cannot send a response");
                let mut meta = response_metadata(request, &Reply::error(ResponseCode::ServFail));
                meta.response_code = ResponseCode::ServFail;
                ResponseInfo::from(Header { metadata: meta, counts: HeaderCounts::default() })
            }
        }
    }
}
