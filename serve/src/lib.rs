//! How every Tideway component serves HTTP: the operator's, the agents' and the DNS server's
//! REST APIs, metrics and probes all go through this kit, so a limit, a TLS change or an
//! authorization rule is written once. The contract (CRD types, conversions) stays in
//! `tideway-api`, which builds without a runtime or a server.
//!
//! ```text
//!  TcpListener --listen::serve (limits; tls: HTTPS or plain on one port)--> axum Router
//!      Router = component routes + http::metrics_router, wrapped by http::with_timeout
//!               and auth::require_tokens; errors as problem::Problem; openapi::router
//! ```
//! * [`http`]: the `/metrics` route and the server helpers every component mounts.
//! * [`listen`]: the accept loop of every HTTP listener: header-read and idle timeouts, a cap
//!   on connections.
//! * [`problem`], [`openapi`]: REST errors as problem details, and OpenAPI documents built
//!   from the handlers' types.
//! * [`bodies`]: REST request bodies beyond merge patches (a packet to trace), checked into
//!   core types.
//! * [`auth`]: bearer tokens for REST changes, and who checks them.
//! * [`tls`]: HTTPS on the REST and metrics ports, the certificate re-read when renewed.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod auth;
pub mod bodies;
pub mod http;
pub mod listen;
pub mod openapi;
pub mod problem;
pub mod tls;
