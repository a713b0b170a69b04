//! The listening side of formation: every accepted connection is
//! handshaken on its own short-lived thread under one deadline, so a
//! stranger who is silent, dribbles bytes or fails the proof holds up
//! nobody but itself. Handshakes in flight are bounded per source address
//! and in all; a newcomer over a bound evicts the oldest handshake it
//! competes with (a stranger flooding connections only evicts its own,
//! while an honest peer's handshake, done in a round trip, is rarely the
//! oldest).

use crate::auth::handshake::{self, Admitted, HandshakeError, Identity};
use std::cell::Cell;
use std::collections::{BTreeSet, HashMap};
use std::io::ErrorKind;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Handshakes in flight from one source address.
pub(crate) const PENDING_PER_SOURCE: usize = 8;
/// Handshakes in flight in all.
pub(crate) const PENDING_TOTAL: usize = 64;

/// The handshakes under way, oldest first: a clone of each one's socket
/// (to cut it when evicted) by a serial number. Formation's gate and the
/// seed's admissions each keep one.
#[derive(Debug, Default)]
pub(crate) struct InFlight {
    next: u64,
    list: std::collections::VecDeque<(u64, IpAddr, TcpStream)>,
}

impl InFlight {
    /// Make room for a handshake from `ip` (which may have `room` under
    /// way at once), evicting the oldest over a bound, and count it in;
    /// its serial number.
    pub(crate) fn admit(
        &mut self,
        ip: IpAddr,
        room: usize,
        stream: &TcpStream,
    ) -> std::io::Result<u64> {
        let from_ip = self.list.iter().filter(|(_, i, _)| *i == ip).count();
        let evict = if from_ip >= room {
            self.list.iter().position(|(_, i, _)| *i == ip)
        } else if self.list.len() >= PENDING_TOTAL {
            Some(0)
        } else {
            None
        };
        if let Some((_, old, s)) = evict.and_then(|at| self.list.remove(at)) {
            tracing::warn!(from = %old, "cut a handshake short: too many under way");
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
        let id = self.next;
        self.next += 1;
        self.list.push_back((id, ip, stream.try_clone()?));
        Ok(id)
    }

    /// Count handshake `id` out; whether it was still counted (not
    /// evicted, its socket not cut).
    pub(crate) fn done(&mut self, id: u64) -> bool {
        let before = self.list.len();
        self.list.retain(|(i, ..)| *i != id);
        self.list.len() < before
    }

    /// Cut every handshake under way.
    pub(crate) fn cut_all(&mut self) {
        for (_, _, s) in self.list.drain(..) {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }
}

/// One handshake's deadline: about a second, less under a shorter
/// formation timeout. An honest peer answers in microseconds; a dialer
/// whose handshake was cut short simply dials again.
pub(crate) fn handshake_time(timeout: Duration) -> Duration {
    timeout.clamp(Duration::from_millis(100), Duration::from_secs(1))
}

/// What one accepted connection's handshake came to.
#[derive(Debug)]
pub(crate) struct Accepted {
    pub from: SocketAddr,
    pub result: Result<(TcpStream, Admitted), (Option<u32>, HandshakeError)>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The listener and the handshakes it has under way.
#[derive(Debug)]
pub(crate) struct Gate {
    listener: TcpListener,
    id: Identity,
    /// The ranks this side accepts links from.
    expect: Arc<BTreeSet<u32>>,
    /// The ranks admitted or being admitted.
    claimed: Arc<Mutex<BTreeSet<u32>>>,
    in_flight: Arc<Mutex<InFlight>>,
    /// Handshakes from each address of an expected peer allowed beyond
    /// `PENDING_PER_SOURCE` (one per peer there).
    room: HashMap<IpAddr, usize>,
    threads: Vec<JoinHandle<()>>,
    time: Duration,
}

/// Connections taken off the listener in one turn, at most: a flood of
/// them does not keep formation from its deadline and its events.
const ACCEPT_PER_TURN: usize = 64;

impl Gate {
    /// A gate admitting the ranks in `expect`, whose addresses (as far
    /// as known) are `addresses`.
    pub(crate) fn new(
        listener: TcpListener,
        id: Identity,
        expect: BTreeSet<u32>,
        addresses: impl IntoIterator<Item = IpAddr>,
        timeout: Duration,
    ) -> Gate {
        let mut room = HashMap::new();
        for ip in addresses {
            *room.entry(ip.to_canonical()).or_insert(0) += 1;
        }
        Gate {
            room,
            listener,
            id,
            expect: Arc::new(expect),
            claimed: Arc::default(),
            in_flight: Arc::default(),
            threads: Vec::new(),
            time: handshake_time(timeout),
        }
    }

    pub(crate) fn listener(&self) -> &TcpListener {
        &self.listener
    }

    /// Take the pending connections (up to [`ACCEPT_PER_TURN`]) and start
    /// their handshakes; each result goes to `done`, then `wake` runs.
    /// `true`: more may wait (the listener is edge-triggered: call again
    /// without waiting for an event).
    pub(crate) fn accept_ready(
        &mut self,
        done: &crossbeam_channel::Sender<Accepted>,
        wake: &Arc<dyn Fn() + Send + Sync>,
    ) -> bool {
        self.threads.retain(|t| !t.is_finished());
        for _ in 0..ACCEPT_PER_TURN {
            let (stream, from) = match self.listener.accept() {
                Ok(x) => x,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return false,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => {
                    tracing::warn!("accept failed: {e}");
                    return false;
                }
            };
            let ip = from.ip().to_canonical();
            let room = PENDING_PER_SOURCE + self.room.get(&ip).copied().unwrap_or(0);
            let serial = match lock(&self.in_flight).admit(ip, room, &stream) {
                Ok(serial) => serial,
                Err(e) => {
                    tracing::warn!(%from, "cannot track a handshake: {e}");
                    continue;
                }
            };
            let (id, expect, claimed, in_flight) = (
                self.id.clone(),
                Arc::clone(&self.expect),
                Arc::clone(&self.claimed),
                Arc::clone(&self.in_flight),
            );
            let (done, wake, deadline) =
                (done.clone(), Arc::clone(wake), Instant::now() + self.time);
            let spawned = std::thread::Builder::new()
                .name("meshwork-handshake".into())
                .spawn(move || {
                    let result =
                        handshake_one(stream, &id, &expect, &claimed, &in_flight, serial, deadline);
                    lock(&in_flight).done(serial);
                    let _ = done.send(Accepted { from, result });
                    wake();
                });
            match spawned {
                Ok(t) => self.threads.push(t),
                Err(e) => {
                    lock(&self.in_flight).done(serial);
                    tracing::warn!(%from, "cannot start a handshake thread: {e}");
                }
            }
        }
        true
    }

    /// From now on, every rank is refused (formation is over).
    pub(crate) fn admit_nobody(&mut self) {
        self.expect = Arc::new(BTreeSet::new());
    }
}

impl Drop for Gate {
    /// Cut the handshakes under way and wait for their threads.
    fn drop(&mut self) {
        lock(&self.in_flight).cut_all();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// One connection's handshake: a rank it claims is released again if
/// the handshake fails after claiming it. A dialer that proved the token
/// stops counting as a stranger before it is told it is admitted, so no
/// newcomer can evict an admitted link.
fn handshake_one(
    mut stream: TcpStream,
    id: &Identity,
    expect: &BTreeSet<u32>,
    claimed: &Mutex<BTreeSet<u32>>,
    in_flight: &Mutex<InFlight>,
    serial: u64,
    deadline: Instant,
) -> Result<(TcpStream, Admitted), (Option<u32>, HandshakeError)> {
    if let Err(e) = stream.set_nonblocking(false) {
        return Err((None, e.into()));
    }
    let took = Cell::new(None);
    let claim = |r: u32| {
        // Evicted already: its socket is cut, the reply will not go out.
        if !lock(in_flight).done(serial) {
            return false;
        }
        let fresh = expect.contains(&r) && lock(claimed).insert(r);
        if fresh {
            took.set(Some(r));
        }
        fresh
    };
    match handshake::accept(&mut stream, id, claim, deadline) {
        Ok(admitted) => {
            let _ = stream.set_read_timeout(None);
            let _ = stream.set_write_timeout(None);
            Ok((stream, admitted))
        }
        Err(e) => {
            if let Some(r) = took.get() {
                lock(claimed).remove(&r);
            }
            Err(e)
        }
    }
}
