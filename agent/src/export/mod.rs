//! The agent's faces for machines: the Prometheus exposition ([`metrics`]), the HTTP server
//! that serves it with the JSON snapshot ([`http`]), and the collection loop ([`agent`]).
pub mod agent;
pub mod http;
pub mod metrics;
