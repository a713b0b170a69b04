//! RPC: `register_rpc`, `rpc`, `rpc_with_timeout`.
//!
//! Requests travel on lane `(comm, Rpc, 0)`: `fn_id` (u32 LE), request id
//! (u64 LE), then the arguments. The response to request `id` travels on
//! lane `(comm, Rpc, 1 + id)`: a status byte (0 ok, 1 no such handler,
//! 2 the handler panicked) and the result or the panic message. Each group
//! has one server thread that takes requests from any rank and hands them
//! to a small pool of workers, so a slow handler never stalls a link or the
//! server, and a handler may itself call `rpc` or send.

use super::GroupInner;
use crate::error::{Error, Result};
use crossbeam_channel::{Receiver, Sender};
use meshwork_transport::{LaneKey, LaneKind, Payload, Transport, TransportError};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

/// A registered handler: `(caller rank, arguments) -> result`.
pub(crate) type Handler = Arc<dyn Fn(u32, &[u8]) -> Vec<u8> + Send + Sync>;

/// A request as the server hands it to a worker: the caller and the bytes.
type Request = (u32, Payload);

/// Workers that run handlers, per group.
const RPC_WORKERS: usize = 2;

const OK: u8 = 0;
const UNKNOWN: u8 = 1;
const FAILED: u8 = 2;

/// Timed-out calls whose late responses are still to be discarded, at most.
const ABANDONED_MAX: usize = 4096;

/// A group's RPC state, shared by callers, the server and its workers.
pub(crate) struct Rpc {
    handlers: RwLock<HashMap<u32, Handler>>,
    /// Request ids, for RPC and the heap's requests alike (their
    /// responses share the response lanes).
    pub(super) next_id: AtomicU64,
    /// (destination, request id) of calls that timed out: their responses,
    /// if they ever come, are discarded by later calls instead of staying
    /// queued forever.
    abandoned: Mutex<VecDeque<(u32, u64)>>,
    /// The group's flight record, which the server answers questions
    /// about (`flight.rs`).
    pub(super) flight: Arc<super::flight::FlightRecord>,
}

impl Rpc {
    pub(crate) fn new() -> Arc<Rpc> {
        Arc::new(Rpc {
            handlers: RwLock::new(HashMap::new()),
            next_id: AtomicU64::new(0),
            abandoned: Mutex::new(VecDeque::new()),
            flight: super::flight::FlightRecord::new(),
        })
    }

    /// Give up on request `id` to `dst`: its response, if it ever comes,
    /// is dropped by a later call.
    pub(super) fn abandon(&self, dst: u32, id: u64) {
        let mut abandoned = self.abandoned.lock().unwrap_or_else(|e| e.into_inner());
        if abandoned.len() == ABANDONED_MAX {
            abandoned.pop_front();
        }
        abandoned.push_back((dst, id));
    }

    pub(crate) fn register(&self, fn_id: u32, handler: Handler) {
        self.handlers
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(fn_id, handler);
    }
}

pub(crate) fn request_key(comm: u64) -> LaneKey {
    LaneKey {
        comm,
        kind: LaneKind::Rpc,
        tag: 0,
    }
}

pub(crate) fn response_key(comm: u64, id: u64) -> LaneKey {
    LaneKey {
        comm,
        kind: LaneKind::Rpc,
        tag: id.wrapping_add(1).max(1),
    }
}

/// Requests the server answers by other means than its workers: those for
/// the reserved function `fn_id()` (the symmetric heap's, answered per
/// requester by `heap/replies.rs`, so one requester that takes no answers
/// never holds up the others).
pub(crate) trait Sideline: Send + Sync {
    /// The function id these requests carry.
    fn fn_id(&self) -> u32;
    /// Take request `request` (head, then arguments) from `src`; never
    /// waits.
    fn take(self: Arc<Self>, src: u32, request: Payload);
}

/// Start the server thread for one group; it starts its workers when the
/// first request arrives (a group that never serves RPC costs one thread,
/// asleep), and they all end when the transport closes. Requests for
/// `sideline`'s function go to it instead.
pub(crate) fn serve(
    transport: Arc<dyn Transport>,
    comm: u64,
    rpc: Arc<Rpc>,
    sideline: Arc<dyn Sideline>,
) {
    let rank = transport.rank();
    let spawned = std::thread::Builder::new()
        .name(format!("meshwork-rpc-{rank}"))
        .spawn(move || {
            let mut workers: Option<Sender<Request>> = None;
            let reserved = sideline.fn_id();
            loop {
                // No deadline of its own: the transport's close ends the
                // wait (`Closed`).
                let req = match transport.recv_any(request_key(comm), IDLE_WAIT) {
                    Ok(req) => req,
                    Err(TransportError::Timeout { .. }) => continue,
                    Err(_) => return,
                };
                // Heap requests the link's reader left here (for want of
                // room to answer with, or a transport that cannot).
                if decode_request(req.1.as_ref()).is_some_and(|(f, ..)| f == reserved) {
                    Arc::clone(&sideline).take(req.0, req.1);
                    continue;
                }
                let tx = workers.get_or_insert_with(|| start_workers(&transport, comm, &rpc));
                if tx.send(req).is_err() {
                    return;
                }
            }
        });
    if let Err(e) = spawned {
        tracing::error!("cannot start the RPC server: {e}; RPC to this rank will time out");
    }
}

/// How long the RPC server sleeps in one wait for a request.
const IDLE_WAIT: Duration = Duration::from_secs(3600);

/// The workers that run handlers (more than one, so a handler may itself
/// call RPC while requests keep being served).
fn start_workers(transport: &Arc<dyn Transport>, comm: u64, rpc: &Arc<Rpc>) -> Sender<Request> {
    let (tx, rx): (Sender<Request>, Receiver<Request>) = crossbeam_channel::bounded(1024);
    for i in 0..RPC_WORKERS {
        let (rx, t, rpc) = (rx.clone(), Arc::clone(transport), Arc::clone(rpc));
        let spawned = std::thread::Builder::new()
            .name(format!("meshwork-rpc-{}-{i}", transport.rank()))
            .spawn(move || {
                for (src, req) in rx {
                    handle(&*t, comm, &rpc, src, &req);
                }
            });
        if let Err(e) = spawned {
            tracing::error!("cannot start an RPC worker: {e}");
        }
    }
    tx
}

/// A request's head: `fn_id`, then the request id (the arguments follow).
pub(crate) fn request_head(fn_id: u32, id: u64) -> [u8; 12] {
    let mut head = [0u8; 12];
    head[..4].copy_from_slice(&fn_id.to_le_bytes());
    head[4..].copy_from_slice(&id.to_le_bytes());
    head
}

/// A request's `(fn_id, request id, arguments)`; `None`: shorter than its
/// head.
pub(crate) fn decode_request(bytes: &[u8]) -> Option<(u32, u64, &[u8])> {
    let (fn_id, rest) = bytes.split_first_chunk::<4>()?;
    let (id, args) = rest.split_first_chunk::<8>()?;
    Some((u32::from_le_bytes(*fn_id), u64::from_le_bytes(*id), args))
}

/// What a response says.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Response<'a> {
    /// The handler's result.
    Ok(&'a [u8]),
    /// No handler for the `fn_id`.
    Unknown,
    /// The handler panicked with this message (UTF-8 from an honest peer).
    Failed(&'a [u8]),
    /// Empty, or an unknown status byte.
    Malformed,
}

impl Response<'_> {
    /// The status byte and body that travel for `self` (`Malformed`
    /// travels as an unknown status).
    #[cfg(any(test, feature = "fuzzing"))]
    pub(crate) fn encode(&self) -> Vec<u8> {
        let (status, body): (u8, &[u8]) = match self {
            Response::Ok(b) => (OK, b),
            Response::Unknown => (UNKNOWN, &[]),
            Response::Failed(b) => (FAILED, b),
            Response::Malformed => (u8::MAX, &[]),
        };
        [&[status], body].concat()
    }
}

/// Decode a response (a pure function: fuzzed).
pub(crate) fn decode_response(bytes: &[u8]) -> Response<'_> {
    match bytes.split_first() {
        Some((&OK, body)) => Response::Ok(body),
        Some((&UNKNOWN, _)) => Response::Unknown,
        Some((&FAILED, body)) => Response::Failed(body),
        _ => Response::Malformed,
    }
}

fn handle(t: &dyn Transport, comm: u64, rpc: &Rpc, src: u32, req: &Payload) {
    let bytes = req.as_ref();
    let Some((fn_id, id, args)) = decode_request(bytes) else {
        tracing::warn!(
            src,
            "malformed RPC request of {} bytes dropped",
            bytes.len()
        );
        return;
    };
    let handler = rpc
        .handlers
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .get(&fn_id)
        .cloned();
    let (status, body) = match handler {
        // The library's own: what the flight record knows of a call, and
        // (on the group's rank 0) who entered it.
        _ if fn_id == super::flight::FLIGHT_FN => {
            (OK, super::flight::answer_question(&rpc.flight, comm, args))
        }
        _ if fn_id == super::flight::FLIGHT_SURVEY_FN => {
            (OK, super::flight::answer_survey(t, comm, rpc, args))
        }
        None => (UNKNOWN, Vec::new()),
        Some(h) => match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| h(src, args))) {
            Ok(out) => (OK, out),
            Err(p) => (FAILED, super::work::panic_message(&*p).into_bytes()),
        },
    };
    if let Err(e) = t.send(src, response_key(comm, id), &[&[status], &body]) {
        tracing::warn!(src, fn_id, "cannot answer an RPC: {e}");
    }
}

impl GroupInner {
    /// Drop responses that arrived after their call gave up.
    pub(super) fn discard_late_responses(&self) {
        let mut abandoned = self.rpc.abandoned.lock().unwrap_or_else(|e| e.into_inner());
        abandoned.retain(|&(dst, id)| {
            let key = response_key(self.comm_id, id);
            // A zero wait takes it if it is there and consumes nothing otherwise.
            !matches!(
                self.transport.recv(dst, key, Duration::ZERO, None),
                Ok(_) | Err(TransportError::PeerDisconnected { .. } | TransportError::Closed)
            )
        });
    }

    pub(crate) fn rpc_call(
        &self,
        dst: u32,
        fn_id: u32,
        args: &[u8],
        timeout: Duration,
    ) -> Result<Vec<u8>> {
        if dst >= self.world {
            return Err(Error::InvalidArgument(format!(
                "rpc: destination {dst} is out of range; this group has ranks 0..{}",
                self.world
            )));
        }
        if self.shut_down.load(Ordering::Acquire) {
            return Err(Error::ShutDown);
        }
        let id = self.rpc.next_id.fetch_add(1, Ordering::Relaxed);
        let op = |e| Error::from_transport(e, "rpc");
        self.transport
            .send(
                dst,
                request_key(self.comm_id),
                &[&request_head(fn_id, id), args],
            )
            .map_err(op)?;
        self.discard_late_responses();
        let reply = match self
            .transport
            .recv(dst, response_key(self.comm_id, id), timeout, None)
        {
            Ok(r) => r,
            Err(e) => {
                self.rpc.abandon(dst, id);
                return Err(op(e));
            }
        };
        match decode_response(reply.as_ref()) {
            Response::Ok(body) => Ok(body.to_vec()),
            Response::Unknown => Err(Error::RpcUnknown { fn_id, rank: dst }),
            Response::Failed(body) => Err(Error::RpcFailed {
                fn_id,
                rank: dst,
                reason: String::from_utf8_lossy(body).into_owned(),
            }),
            Response::Malformed => Err(Error::RpcFailed {
                fn_id,
                rank: dst,
                reason: "malformed response".into(),
            }),
        }
    }
}

impl GroupInner {
    /// [`rpc_call`](Self::rpc_call) to every rank of `dsts` at once, all
    /// waited for together for at most `timeout`: each rank's answer (or
    /// why there is none).
    pub(crate) fn rpc_many(
        &self,
        dsts: &[u32],
        fn_id: u32,
        args: &[u8],
        timeout: Duration,
    ) -> Vec<(u32, Result<Vec<u8>>)> {
        ask_many(
            &*self.transport,
            self.comm_id,
            &self.rpc,
            dsts,
            fn_id,
            args,
            timeout,
        )
    }
}

/// [`GroupInner::rpc_many`] over group `comm`'s transport `t` and RPC
/// state, for an RPC worker that asks in turn (it has no `GroupInner`).
pub(super) fn ask_many(
    t: &dyn Transport,
    comm: u64,
    rpc: &Rpc,
    dsts: &[u32],
    fn_id: u32,
    args: &[u8],
    timeout: Duration,
) -> Vec<(u32, Result<Vec<u8>>)> {
    let until = std::time::Instant::now() + timeout;
    let op = |e| Error::from_transport(e, "rpc");
    let asked: Vec<(u32, Result<u64>)> = dsts
        .iter()
        .map(|&dst| {
            let id = rpc.next_id.fetch_add(1, Ordering::Relaxed);
            let sent = t
                .send(dst, request_key(comm), &[&request_head(fn_id, id), args])
                .map(|()| id)
                .map_err(op);
            (dst, sent)
        })
        .collect();
    asked
        .into_iter()
        .map(|(dst, id)| {
            let answer = id.and_then(|id| {
                let left = until.saturating_duration_since(std::time::Instant::now());
                match t.recv(dst, response_key(comm, id), left, None) {
                    Ok(r) => match decode_response(r.as_ref()) {
                        Response::Ok(body) => Ok(body.to_vec()),
                        _ => Err(Error::RpcFailed {
                            fn_id,
                            rank: dst,
                            reason: "no answer".into(),
                        }),
                    },
                    Err(e) => {
                        rpc.abandon(dst, id);
                        Err(op(e))
                    }
                }
            });
            (dst, answer)
        })
        .collect()
}

impl super::ProcessGroup {
    /// Register `handler` for `fn_id` on this rank, replacing any earlier
    /// one. It runs on the group's RPC workers with the caller's rank and
    /// the arguments, and may itself call `rpc` or send. Ids from
    /// `0xFFFF_FF00` are reserved for the library: `0xFFFF_FFF0` carries
    /// the one-sided operations, `0xFFFF_FFF1` and `0xFFFF_FFF2` the
    /// flight record's questions, and a handler registered there is never
    /// called.
    pub fn register_rpc(
        &self,
        fn_id: u32,
        handler: impl Fn(u32, &[u8]) -> Vec<u8> + Send + Sync + 'static,
    ) {
        self.inner().rpc.register(fn_id, Arc::new(handler));
    }

    /// Call `fn_id` on `dst` with `args`; waits up to the group's deadline.
    /// `RpcUnknown` if `dst` has no such handler, `RpcFailed` if it
    /// panicked; both ranks stay usable either way.
    pub fn rpc(&self, dst: u32, fn_id: u32, args: &[u8]) -> Result<Vec<u8>> {
        self.inner()
            .rpc_call(dst, fn_id, args, self.inner().timeout())
    }

    /// [`ProcessGroup::rpc`](super::ProcessGroup::rpc) with its own deadline.
    pub fn rpc_with_timeout(
        &self,
        dst: u32,
        fn_id: u32,
        args: &[u8],
        timeout: Duration,
    ) -> Result<Vec<u8>> {
        self.inner().rpc_call(dst, fn_id, args, timeout)
    }
}
