pub mod http;
pub mod server;
