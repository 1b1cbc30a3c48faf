//! A TLS-terminating proxy on 127.0.0.1, as a load balancer in front of a `reel serve` node
//! would be: it speaks TLS with a self-signed certificate for 127.0.0.1 (written as PEM for
//! the client's `SSL_CERT_FILE`) and pipes each connection's bytes to a plain TCP port.

use std::{net::TcpListener, path::PathBuf, sync::Arc};

use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio_rustls::TlsAcceptor;

/// The running proxy; it stops with the test process.
pub struct TlsProxy {
    port: u16,
    /// The certificate, PEM, for `SSL_CERT_FILE`.
    pub certificate: PathBuf,
    _dir: tempfile::TempDir,
}

impl TlsProxy {
    /// Proxies TLS on a free port to plain TCP on 127.0.0.1:`to`.
    pub fn start(to: u16) -> Self {
        let rcgen::CertifiedKey { cert, signing_key } =
            rcgen::generate_simple_self_signed(vec!["127.0.0.1".into(), "localhost".into()])
                .expect("a self-signed certificate");
        let dir = tempfile::tempdir().unwrap();
        let certificate = dir.path().join("proxy.pem");
        std::fs::write(&certificate, cert.pem()).unwrap();
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(signing_key.serialize_der()));
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![CertificateDer::from(cert.der().to_vec())], key)
            .expect("a server configuration");
        let acceptor = TlsAcceptor::from(Arc::new(config));
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                while let Ok((client, _)) = listener.accept().await {
                    let acceptor = acceptor.clone();
                    tokio::spawn(async move {
                        let Ok(mut client) = acceptor.accept(client).await else {
                            return;
                        };
                        let Ok(mut node) = tokio::net::TcpStream::connect(("127.0.0.1", to)).await
                        else {
                            return;
                        };
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut node).await;
                    });
                }
            });
        });
        Self {
            port,
            certificate,
            _dir: dir,
        }
    }

    /// The proxy's URL: `https://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }
}
