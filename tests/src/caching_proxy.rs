//! A caching reverse proxy in front of a `reel serve` for tests: Debian's nginx with
//! `proxy_cache`, on 127.0.0.1, in a temporary folder of its own (one process, no daemon). Its
//! `X-Cache-Status` header says whether it answered from its cache (`HIT`) or asked reel.

use std::{
    path::Path,
    process::{Child, Command, Stdio},
    time::Duration,
};

use crate::{free_port, skip};

/// A running nginx; stopped when dropped.
pub struct CachingProxy {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    _dir: tempfile::TempDir,
}

impl CachingProxy {
    /// nginx in front of `upstream` (`http://127.0.0.1:PORT`); `None` after saying why when
    /// nginx is not installed (`.ci/run` installs it).
    pub fn start(upstream: &str) -> Option<Self> {
        if Command::new("nginx").arg("-v").output().is_err() {
            skip("nginx is not installed (apt-get install nginx-light; .ci/run does)");
            return None;
        }
        let dir = tempfile::tempdir().expect("a temporary folder");
        let port = free_port();
        let config = dir.path().join("nginx.conf");
        std::fs::write(&config, configuration(dir.path(), port, upstream)).expect("nginx.conf");
        let mut child = Command::new("nginx")
            .arg("-p")
            .arg(dir.path())
            .arg("-c")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("nginx starts");
        let base = format!("http://127.0.0.1:{port}");
        for _ in 0..500 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Some(Self {
                    child,
                    base,
                    _dir: dir,
                });
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = child.kill();
        let _ = child.wait();
        panic!("nginx never listened on {port}");
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }
}

impl Drop for CachingProxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One process in the foreground, everything in `dir`; responses cached as reel's
/// `Cache-Control` says (and per `Authorization`, as its `Vary` says), concurrent misses of one
/// URL collapsed into one upstream request, SSE passed through unbuffered.
fn configuration(dir: &Path, port: u16, upstream: &str) -> String {
    let dir = dir.display();
    format!(
        r#"daemon off;
master_process off;
worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 512; }}
http {{
  access_log off;
  client_body_temp_path {dir}/body;
  proxy_temp_path {dir}/proxy;
  fastcgi_temp_path {dir}/fastcgi;
  uwsgi_temp_path {dir}/uwsgi;
  scgi_temp_path {dir}/scgi;
  proxy_cache_path {dir}/cache levels=1 keys_zone=reel:1m max_size=64m;
  server {{
    listen 127.0.0.1:{port};
    location / {{
      proxy_pass {upstream};
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_read_timeout 120s;
      proxy_cache reel;
      proxy_cache_lock on;
      add_header X-Cache-Status $upstream_cache_status always;
    }}
  }}
}}
"#
    )
}
