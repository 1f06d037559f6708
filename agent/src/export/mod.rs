//! The agent's faces for machines: the Prometheus exposition ([`metrics`]), the HTTP server
//! that serves it with the JSON snapshot ([`http`]), the collection loop ([`agent`]), and the
//! retirement of pools that stopped moving ([`retire`]).
pub mod agent;
pub mod http;
pub mod metrics;
pub mod retire;
