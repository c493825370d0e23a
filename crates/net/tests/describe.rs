//! `Describe` against a real server on loopback: the far end's machine and
//! interface come back, a token is required where the server asks for one,
//! and a wrong one is refused like a wrong `Open`.

mod common;

use common::TestServer;
use osprobe_net::client::NetError;
use osprobe_net::describe;
use osprobe_net::protocol::ErrorCode;
use osprobe_net::server::ServerConfig;

#[test]
fn a_server_describes_its_machine_and_the_connections_interface() {
    let server = TestServer::start(ServerConfig {
        build: osprobe_core::environment::BuildInfo {
            version: "9.9.9".into(),
            commit: "abc123".into(),
            profile: "debug".into(),
        },
        ..ServerConfig::default()
    });
    let end = describe::far_end(&server.peer(None), "localhost");
    assert_eq!(end.error, None);
    let env = end.environment.expect("an environment");
    assert!(!env.kernel.is_empty() && env.logical_cpus > 0, "{env:?}");
    assert_eq!(env.build.commit, "abc123", "the serving binary is named");
    assert_ne!(
        env.clock.source, "unknown",
        "the server's clock was calibrated"
    );
    let far = end.far_nic.expect("the far interface");
    let near = end.near_nic.expect("the near interface");
    assert_eq!((far.name.as_str(), near.name.as_str()), ("lo", "lo"));
    assert_eq!(far.address, "127.0.0.1");
    assert!(far.mtu.is_some());
    assert_eq!(end.address, server.addr.to_string());
}

#[test]
fn a_token_server_describes_itself_only_to_a_client_with_the_token() {
    let server = TestServer::start(ServerConfig {
        token: Some("s3cret".into()),
        ..ServerConfig::default()
    });
    assert!(server.peer(Some("s3cret")).describe().is_ok());
    let err = server.peer(None).describe().unwrap_err();
    assert!(matches!(err, NetError::TokenRequired { .. }), "{err}");
    let err = server.peer(Some("wrong")).describe().unwrap_err();
    assert!(
        matches!(
            err,
            NetError::Refused {
                code: ErrorCode::Auth,
                ..
            }
        ),
        "{err}"
    );
    // A far end not described says why, in one line.
    let end = describe::far_end(&server.peer(Some("wrong")), "localhost");
    let why = end.error.expect("an error");
    assert!(why.contains("wrong token") && !why.contains('\n'), "{why}");
    assert!(end.environment.is_none() && end.near_nic.is_some());
}
