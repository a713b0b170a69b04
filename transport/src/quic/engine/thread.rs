//! A QUIC link's I/O thread: the loop of quiche's `examples/server.rs`
//! (see the parent module), with the sidecar served first on each turn
//! and, once the QUIC connection has ended, alone until it ends too.

use super::*;

/// The link's thread: it drives the QUIC connection and the sidecar.
/// The QUIC part ends when the connection closes (by this side's `Close`,
/// by the peer, or by a failure: the peer's ranks are then gone); the
/// thread then serves the sidecar alone until it ends too (its last
/// payloads, its goodbye).
pub(crate) fn run(
    core: Arc<Core>,
    link: Arc<QLink>,
    order: Arc<Order>,
    sidecar: Arc<TcpLink>,
    mut poll: mio::Poll,
) {
    let peer = link.peer;
    let fd = lock(&link).io.socket.as_raw_fd();
    let registered = link
        .watch
        .attach(poll.registry(), SOCKET, fd, Arc::clone(&link.waker))
        .and_then(|()| sidecar.attach(poll.registry(), SIDECAR, Arc::clone(&link.waker)));
    if let Err(e) = registered {
        tracing::error!(peer, "cannot poll the link's sockets: {e}");
        link.alive.store(false, Ordering::Release);
        link.done.set();
        core.lost(peer);
        sidecar.shutdown();
        return;
    }
    let mut events = mio::Events::with_capacity(8);
    // The first turn writes whatever was queued before the thread started.
    let mut side_readable = true;
    // Answering requests: look again without sleeping for a while.
    let mut spin = crate::link::AnswerSpin::new(&core);
    let ended = loop {
        // The sidecar first, outside the engine's lock (its end takes it).
        let side_wait = match sidecar.service(&core, side_readable) {
            Serviced::Within(d) => d,
            Serviced::Ended => heartbeat_interval(core.timeout()),
        };
        let keep_alive = crate::quic::keep_alive_interval(core.timeout());
        let wait = {
            let mut e = lock(&link);
            let wait = if std::mem::take(&mut e.again) {
                Duration::ZERO
            } else {
                let timer =
                    e.io.conn
                        .timeout()
                        .map_or(keep_alive, |t| t.min(keep_alive));
                // Busy: packets in flight (a loss timer under the
                // keep-alive period), an ACK owed, or closing.
                let busy = timer < keep_alive || e.ack_owed.is_some() || e.closing.is_some();
                let ack = e.ack_owed.map_or(keep_alive, |since| {
                    ACK_DELAY.saturating_sub(since.elapsed())
                });
                if busy {
                    timer.min(TICK).min(ack)
                } else {
                    timer
                }
            }
            .min(side_wait)
            // Reading back on when the callers' quiet period is over.
            .min(link.watch.settle(core.answered()).unwrap_or(Duration::MAX));
            let wait = spin.wait(&core, wait);
            e.planned = Instant::now() + wait;
            wait
        };
        if let Err(e) = poll.poll(&mut events, Some(wait)) {
            if e.kind() != ErrorKind::Interrupted {
                break Some(LinkFailure::Poll(e));
            }
        }
        side_readable = readable_in(&events, SIDECAR);
        let mut e = lock(&link);
        e.planned = Instant::now();
        match e.turn(&core, &link, &order, keep_alive) {
            None => {}
            Some(Some(failure)) => break Some(failure),
            Some(None) => break None,
        }
    };
    let mut e = lock(&link);
    e.ended = true;
    link.alive.store(false, Ordering::Release);
    // Give back the budget of what will never be sent.
    e.take_cmds(&core);
    for q in &mut e.out {
        for c in q.drain(..) {
            link.budget.release(c.release);
        }
    }
    let lost = match (&ended, e.closing.is_some()) {
        (_, true) => false,
        (Some(x), false) => {
            tracing::debug!(peer, "QUIC link ended: {x}");
            true
        }
        // The peer closed its QUIC end in order; its sidecar's end (after
        // the payloads still on their way) ends the peer here.
        (None, false) if !e.sidecar_ended => {
            tracing::debug!(peer, "QUIC link closed by the peer");
            false
        }
        (None, false) => true,
    };
    drop(e);
    link.done.set();
    if lost {
        core.lost(peer);
    }
    // The sidecar alone, until it ends.
    sidecar.serve(&core, &mut poll, SIDECAR, side_readable);
}
