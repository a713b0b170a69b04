//! Forming a group from addresses a program exchanged itself (a
//! launcher's key-value store, torchrun's rendezvous): bind a listener
//! first, publish its address, then `form` with everyone's.
//!
//! ```python
//! listener = meshwork.Listener("10.0.0.5")     # a free port, held
//! store.set(f"addr/{rank}", listener.address)
//! peers = [store.get(f"addr/{r}") for r in range(world)]
//! g = meshwork.form(rank, world, peers, listener=listener, token=token)
//! ```

use crate::errors::{invalid, to_py};
use crate::group::ProcessGroup;
use pyo3::prelude::*;
use std::net::{IpAddr, SocketAddr, TcpListener, UdpSocket};
use std::sync::Mutex;
use std::time::Duration;

/// A TCP listener and a UDP socket on one free port of `host`, held
/// until `meshwork.form` takes them: publish `address`, then form. No
/// other program can take the port in between.
#[pyclass(frozen, module = "meshwork", name = "Listener")]
#[derive(Debug)]
pub(crate) struct Listener {
    sockets: Mutex<Option<(TcpListener, UdpSocket)>>,
    addr: SocketAddr,
}

#[pymethods]
impl Listener {
    /// Bind a free port on `host` (an IP address: "127.0.0.1", "10.0.0.5",
    /// "::1").
    #[new]
    fn new(py: Python<'_>, host: &str) -> PyResult<Listener> {
        let ip: IpAddr = host.parse().map_err(|_| {
            invalid(
                py,
                format!("Listener: {host:?} is not an IP address; give the address to listen on"),
            )
        })?;
        let (tcp, udp) = mw::bind_rank_sockets(ip).map_err(|e| {
            to_py(
                py,
                mw::Error::Io(std::io::Error::other(format!("cannot bind {ip}: {e}"))),
            )
        })?;
        let addr = tcp.local_addr().map_err(|e| to_py(py, mw::Error::Io(e)))?;
        Ok(Listener {
            sockets: Mutex::new(Some((tcp, udp))),
            addr,
        })
    }

    /// "host:port", to publish.
    #[getter]
    fn address(&self) -> String {
        self.addr.to_string()
    }

    fn __repr__(&self) -> String {
        format!("<meshwork.Listener {}>", self.addr)
    }
}

/// Form a group of `world` ranks as rank `rank`, given every rank's
/// address in rank order (`peers`, "host:port" strings, this rank's
/// included). Blocks, with the GIL released, until every rank has
/// joined or the deadline passes (`meshwork.FormationTimeout`); Ctrl-C
/// raises `KeyboardInterrupt` at once.
///
/// `listener`: this rank's sockets, bound beforehand (`meshwork.Listener`),
/// whose address is `peers[rank]`. `token`: the cluster token (required
/// when any address is off loopback; at least 16 bytes;
/// `meshwork.random_token()` makes one). `timeout`: the deadline of every
/// blocking call, seconds (default 60). `transport`: "quic" (default) or
/// "tcp". `shared_memory`: ranks of one host talk through shared memory
/// (default True).
#[pyfunction]
#[pyo3(signature = (rank, world, peers, *, listener = None, token = None, timeout = None, transport = None, shared_memory = None))]
#[allow(
    clippy::too_many_arguments,
    reason = "keyword arguments of one Python call"
)]
pub(crate) fn form(
    py: Python<'_>,
    rank: u32,
    world: u32,
    peers: Vec<String>,
    listener: Option<&Listener>,
    token: Option<String>,
    timeout: Option<f64>,
    transport: Option<&str>,
    shared_memory: Option<bool>,
) -> PyResult<ProcessGroup> {
    let mut node = mw::Node::new(rank, world)
        .peers(peers.iter().map(String::as_str))
        .map_err(|e| to_py(py, e))?;
    if let Some(l) = listener {
        let taken = l
            .sockets
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .ok_or_else(|| invalid(py, format!("form: listener {} was used already", l.addr)))?;
        node = node.listen_on(taken.0, Some(taken.1));
    }
    if let Some(t) = token {
        node = node.cluster_token(t);
    }
    if let Some(s) = timeout {
        let t = Duration::try_from_secs_f64(s)
            .ok()
            .filter(|t| !t.is_zero())
            .ok_or_else(|| {
                invalid(
                    py,
                    format!("form: timeout {s} is not a positive number of seconds"),
                )
            })?;
        node = node.timeout(t);
    }
    match transport {
        None | Some("quic") => {}
        Some("tcp") => node = node.transport(mw::TransportKind::Tcp),
        Some(other) => {
            return Err(invalid(
                py,
                format!("form: transport {other:?}; use \"quic\" or \"tcp\""),
            ))
        }
    }
    if let Some(on) = shared_memory {
        node = node.shared_memory(on);
    }
    let inner = crate::interrupt::abandonable(py, move || node.connect())?;
    Ok(ProcessGroup { inner })
}

/// A fresh random cluster token (32 random bytes as 64 hex characters),
/// as `meshrun token` prints.
#[pyfunction]
pub(crate) fn random_token(py: Python<'_>) -> PyResult<String> {
    mw::random_token().map_err(|e| to_py(py, mw::Error::Io(e)))
}
