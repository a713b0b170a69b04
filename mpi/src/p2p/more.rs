//! The rest of point-to-point: persistent requests (`MPI_Send_init`,
//! `MPI_Recv_init`, `MPI_Start`), buffered sends (eager here, so the
//! attached buffer is only kept and handed back), `MPI_Isendrecv`,
//! matched probes (`MPI_Mprobe`, `MPI_Mrecv`), `MPI_Waitsome` and
//! `MPI_Testsome`, cancelling a receive, and the status setters.

use super::*;
use crate::put;

/// What a persistent request starts, each time.
pub(crate) enum Persist {
    Send {
        comm: Arc<Comm>,
        buf: usize,
        count: c_int,
        dt: Handle,
        dest: c_int,
        tag: c_int,
        /// A synchronous send (`MPI_Ssend_init`).
        sync: bool,
    },
    Recv {
        comm: Arc<Comm>,
        buf: usize,
        count: c_int,
        dt: Handle,
        source: c_int,
        tag: c_int,
    },
    /// A persistent collective (`MPI_Allreduce_init` and its kin): its
    /// `MPI_I…` form, started again on the arguments it was made with.
    Coll(crate::coll::Restart),
}

impl Persist {
    fn start(&self) -> Result<Request> {
        match self {
            Persist::Send {
                comm,
                buf,
                count,
                dt,
                dest,
                tag,
                sync,
            } => {
                let buf = *buf as *const u8;
                if *sync {
                    return start_ssend(comm, buf, *count, *dt, *dest, *tag);
                }
                Ok(start_send(comm, buf, *count, *dt, *dest, *tag, false)?.request())
            }
            Persist::Recv {
                comm,
                buf,
                count,
                dt,
                source,
                tag,
            } => post_recv(comm, *buf as *mut u8, *count, *dt, *source, *tag),
            Persist::Coll(restart) => restart.start(),
        }
    }
}

fn count_of(n: i64, name: &str) -> Result<c_int> {
    c_int::try_from(n)
        .map_err(|_| Fail::new(ERR_COUNT, format!("{name}: count {n} is above 2^31 - 1")))
}

pub(crate) fn init(
    ch: Handle,
    name: &str,
    request: *mut Handle,
    make: impl FnOnce(Arc<Comm>) -> Result<Persist>,
) -> c_int {
    entry(ch, name, || {
        start_request(request, || {
            let p = make(comm(ch)?)?;
            add_request(Request::Persistent(Arc::new(p), None))
        })
    })
}

macro_rules! send_init {
    ($($name:ident $name_c:ident $sync:literal)*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name(buf: *const u8, count: c_int, dt: Handle, dest: c_int, tag: c_int, ch: Handle, request: *mut Handle) -> c_int {
            init(ch, stringify!($name), request, |comm| {
                let buf = buf as usize;
                Ok(Persist::Send { comm, buf, count, dt, dest, tag, sync: $sync })
            })
        }

        #[no_mangle]
        pub unsafe extern "C" fn $name_c(buf: *const u8, count: i64, dt: Handle, dest: c_int, tag: c_int, ch: Handle, request: *mut Handle) -> c_int {
            init(ch, stringify!($name_c), request, |comm| {
                let (buf, count) = (buf as usize, count_of(count, stringify!($name_c))?);
                Ok(Persist::Send { comm, buf, count, dt, dest, tag, sync: $sync })
            })
        }
    )*};
}

send_init! {
    MPI_Send_init MPI_Send_init_c false
    MPI_Ssend_init MPI_Ssend_init_c true
    MPI_Rsend_init MPI_Rsend_init_c false
    MPI_Bsend_init MPI_Bsend_init_c false
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Recv_init(
    buf: *mut u8,
    count: c_int,
    dt: Handle,
    source: c_int,
    tag: c_int,
    ch: Handle,
    request: *mut Handle,
) -> c_int {
    init(ch, "MPI_Recv_init", request, |comm| {
        let buf = buf as usize;
        Ok(Persist::Recv {
            comm,
            buf,
            count,
            dt,
            source,
            tag,
        })
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Recv_init_c(
    buf: *mut u8,
    count: i64,
    dt: Handle,
    source: c_int,
    tag: c_int,
    ch: Handle,
    request: *mut Handle,
) -> c_int {
    init(ch, "MPI_Recv_init_c", request, |comm| {
        let (buf, count) = (buf as usize, count_of(count, "MPI_Recv_init_c")?);
        Ok(Persist::Recv {
            comm,
            buf,
            count,
            dt,
            source,
            tag,
        })
    })
}

/// Start persistent request `h`.
fn start(h: Handle) -> Result<()> {
    let Request::Persistent(p, active) = take_request(h)? else {
        return Err(Fail::new(
            ERR_REQUEST,
            format!("{h:#x} is not a persistent request"),
        ));
    };
    if active.is_some() {
        put_request(h, Request::Persistent(p, active));
        return Err(Fail::new(
            ERR_REQUEST,
            "the persistent request is active already",
        ));
    }
    let started = p.start();
    match started {
        Ok(r) => {
            put_request(h, Request::Persistent(p, Some(Box::new(r))));
            Ok(())
        }
        Err(e) => {
            put_request(h, Request::Persistent(p, None));
            Err(e)
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Start(request: *mut Handle) -> c_int {
    entry(COMM_WORLD, "MPI_Start", || {
        if request.is_null() {
            return Err(Fail::arg("request is NULL"));
        }
        // SAFETY: non-NULL, valid (the contract).
        start(unsafe { *request })
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Startall(count: c_int, reqs: *mut Handle) -> c_int {
    entry(COMM_WORLD, "MPI_Startall", || {
        let n = usize::try_from(count).map_err(|_| Fail::new(ERR_COUNT, "count is negative"))?;
        for i in 0..n {
            // SAFETY: `count` requests (the contract).
            start(unsafe { req_at(reqs, i) })?;
        }
        Ok(())
    })
}

// ------------------------------------------------------------ buffered

/// The buffers `MPI_Buffer_attach` (for the process, under
/// `COMM_NULL`) and `MPI_Comm_attach_buffer` gave: address and size.
/// A buffered send here goes out as a standard send does, without a copy
/// into the buffer, so a buffer is only kept, for its detach to hand
/// back, and a flush has nothing to wait for.
static ATTACHED: Mutex<Vec<(Handle, usize, i64)>> = Mutex::new(Vec::new());

/// `body` as call `name` on the buffer of `owner` (a communicator, or
/// `COMM_NULL` for the process's), errors raised on `owner` (the
/// process's on `MPI_COMM_WORLD`).
fn on_buffer_of(owner: Handle, name: &str, body: impl FnOnce() -> Result<()>) -> c_int {
    if owner == COMM_NULL {
        return entry(COMM_WORLD, name, body);
    }
    entry(owner, name, || {
        comm(owner)?;
        body()
    })
}

fn attach(owner: Handle, name: &str, buf: *mut u8, size: i64) -> c_int {
    on_buffer_of(owner, name, || {
        if size < 0 {
            return Err(Fail::new(ERR_ARG, format!("size {size} is negative")));
        }
        let mut a = lock(&ATTACHED);
        if a.iter().any(|&(o, _, _)| o == owner) {
            return Err(Fail::new(ERR_BUFFER, "a buffer is attached already"));
        }
        a.push((owner, buf as usize, size));
        Ok(())
    })
}

/// # Safety
/// `buf` and `size` are NULL or valid for writes.
unsafe fn detach(owner: Handle, name: &str, buf: *mut usize, size: *mut i64) -> c_int {
    on_buffer_of(owner, name, || {
        let mut a = lock(&ATTACHED);
        let i = a
            .iter()
            .position(|&(o, _, _)| o == owner)
            .ok_or_else(|| Fail::new(ERR_BUFFER, "no buffer is attached"))?;
        let (_, at, n) = a.remove(i);
        // SAFETY: NULL or valid (the contract).
        unsafe {
            put(buf, at);
            put(size, n);
        }
        Ok(())
    })
}

/// A flush: the buffered sends this owner made are out already.
fn flush(owner: Handle, name: &str) -> c_int {
    on_buffer_of(owner, name, || Ok(()))
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Buffer_attach(buf: *mut u8, size: c_int) -> c_int {
    attach(COMM_NULL, "MPI_Buffer_attach", buf, i64::from(size))
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Buffer_attach_c(buf: *mut u8, size: i64) -> c_int {
    attach(COMM_NULL, "MPI_Buffer_attach_c", buf, size)
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Comm_attach_buffer(ch: Handle, buf: *mut u8, size: c_int) -> c_int {
    attach(ch, "MPI_Comm_attach_buffer", buf, i64::from(size))
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Comm_attach_buffer_c(ch: Handle, buf: *mut u8, size: i64) -> c_int {
    attach(ch, "MPI_Comm_attach_buffer_c", buf, size)
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Buffer_detach(buf: *mut usize, size: *mut c_int) -> c_int {
    let mut big = 0i64;
    // SAFETY: the same contract, with a valid size.
    let rc = unsafe { detach(COMM_NULL, "MPI_Buffer_detach", buf, &mut big) };
    // SAFETY: NULL or valid (the contract).
    unsafe { put(size, big as c_int) };
    rc
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Buffer_detach_c(buf: *mut usize, size: *mut i64) -> c_int {
    // SAFETY: the contract.
    unsafe { detach(COMM_NULL, "MPI_Buffer_detach_c", buf, size) }
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Comm_detach_buffer(
    ch: Handle,
    buf: *mut usize,
    size: *mut c_int,
) -> c_int {
    let mut big = 0i64;
    // SAFETY: the same contract, with a valid size.
    let rc = unsafe { detach(ch, "MPI_Comm_detach_buffer", buf, &mut big) };
    // SAFETY: NULL or valid (the contract).
    unsafe { put(size, big as c_int) };
    rc
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Comm_detach_buffer_c(
    ch: Handle,
    buf: *mut usize,
    size: *mut i64,
) -> c_int {
    // SAFETY: the contract.
    unsafe { detach(ch, "MPI_Comm_detach_buffer_c", buf, size) }
}

#[no_mangle]
pub extern "C" fn MPI_Buffer_flush() -> c_int {
    flush(COMM_NULL, "MPI_Buffer_flush")
}

#[no_mangle]
pub extern "C" fn MPI_Comm_flush_buffer(ch: Handle) -> c_int {
    flush(ch, "MPI_Comm_flush_buffer")
}

/// # Safety
/// `request` is valid for a write.
unsafe fn iflush(owner: Handle, name: &str, request: *mut Handle) -> c_int {
    let rc = flush(owner, name);
    if rc == SUCCESS {
        // Complete already: MPI's empty status, no entry.
        // SAFETY: the contract.
        unsafe { put(request, SENT) };
    }
    rc
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Buffer_iflush(request: *mut Handle) -> c_int {
    // SAFETY: the contract.
    unsafe { iflush(COMM_NULL, "MPI_Buffer_iflush", request) }
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Comm_iflush_buffer(ch: Handle, request: *mut Handle) -> c_int {
    // SAFETY: the contract.
    unsafe { iflush(ch, "MPI_Comm_iflush_buffer", request) }
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Bsend(
    buf: *const u8,
    count: c_int,
    dt: Handle,
    dest: c_int,
    tag: c_int,
    ch: Handle,
) -> c_int {
    // SAFETY: the same contract.
    unsafe { MPI_Send(buf, count, dt, dest, tag, ch) }
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Bsend_c(
    buf: *const u8,
    count: i64,
    dt: Handle,
    dest: c_int,
    tag: c_int,
    ch: Handle,
) -> c_int {
    match c_int::try_from(count) {
        // SAFETY: the same contract.
        Ok(n) => unsafe { MPI_Send(buf, n, dt, dest, tag, ch) },
        Err(_) => raise(
            ch,
            "MPI_Bsend_c",
            Fail::new(ERR_COUNT, "count above 2^31 - 1"),
        ),
    }
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Ibsend(
    buf: *const u8,
    count: c_int,
    dt: Handle,
    dest: c_int,
    tag: c_int,
    ch: Handle,
    request: *mut Handle,
) -> c_int {
    // SAFETY: the same contract.
    unsafe { MPI_Isend(buf, count, dt, dest, tag, ch, request) }
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Ibsend_c(
    buf: *const u8,
    count: i64,
    dt: Handle,
    dest: c_int,
    tag: c_int,
    ch: Handle,
    request: *mut Handle,
) -> c_int {
    match c_int::try_from(count) {
        // SAFETY: the same contract.
        Ok(n) => unsafe { MPI_Isend(buf, n, dt, dest, tag, ch, request) },
        Err(_) => raise(
            ch,
            "MPI_Ibsend_c",
            Fail::new(ERR_COUNT, "count above 2^31 - 1"),
        ),
    }
}

// ------------------------------------------------------------ isendrecv

#[no_mangle]
pub unsafe extern "C" fn MPI_Isendrecv(
    sendbuf: *const u8,
    sendcount: c_int,
    sendtype: Handle,
    dest: c_int,
    sendtag: c_int,
    recvbuf: *mut u8,
    recvcount: c_int,
    recvtype: Handle,
    source: c_int,
    recvtag: c_int,
    ch: Handle,
    request: *mut Handle,
) -> c_int {
    entry(ch, "MPI_Isendrecv", || {
        start_request(request, || {
            let c = comm(ch)?;
            // The send's arguments first: a receive posted by a call that
            // fails would take a message for nobody.
            send_args(&c, dest, sendtag)?;
            type_of(sendtype)?;
            let recv = post_recv(&c, recvbuf, recvcount, recvtype, source, recvtag)?;
            let send = start_send(&c, sendbuf, sendcount, sendtype, dest, sendtag, false)?;
            add_request(Request::Pair(Box::new(send.request()), Box::new(recv)))
        })
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Isendrecv_c(
    sendbuf: *const u8,
    sendcount: i64,
    sendtype: Handle,
    dest: c_int,
    sendtag: c_int,
    recvbuf: *mut u8,
    recvcount: i64,
    recvtype: Handle,
    source: c_int,
    recvtag: c_int,
    ch: Handle,
    request: *mut Handle,
) -> c_int {
    let (Ok(s), Ok(r)) = (c_int::try_from(sendcount), c_int::try_from(recvcount)) else {
        return raise(
            ch,
            "MPI_Isendrecv_c",
            Fail::new(ERR_COUNT, "count above 2^31 - 1"),
        );
    };
    // SAFETY: the same contract.
    unsafe {
        MPI_Isendrecv(
            sendbuf, s, sendtype, dest, sendtag, recvbuf, r, recvtype, source, recvtag, ch, request,
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Isendrecv_replace(
    buf: *mut u8,
    count: c_int,
    dt: Handle,
    dest: c_int,
    sendtag: c_int,
    source: c_int,
    recvtag: c_int,
    ch: Handle,
    request: *mut Handle,
) -> c_int {
    entry(ch, "MPI_Isendrecv_replace", || {
        if request.is_null() {
            return Err(Fail::arg("request is NULL"));
        }
        let c = comm(ch)?;
        let ty = type_of(dt)?;
        let n = usize::try_from(count).map_err(|_| Fail::new(ERR_COUNT, "count is negative"))?;
        // The message leaves from a copy; the receive lands in `buf`.
        // SAFETY: `buf` holds `count` elements (the contract).
        let copy = unsafe { ty.pack(buf, n) }?.into_owned();
        let dst = send_args(&c, dest, sendtag)?;
        let recv = post_recv(&c, buf, count, dt, source, recvtag)?;
        let Some(dst) = dst else {
            let h = add_request(recv)?;
            // SAFETY: non-NULL, valid (the contract).
            unsafe { put(request, h) };
            return Ok(());
        };
        // The copy goes out in order behind this rank's other sends.
        let send = send_owned(&c, dst, Head::new(sendtag, None), copy)?.request();
        let h = add_request(Request::Pair(Box::new(send), Box::new(recv)))?;
        // SAFETY: non-NULL, valid (the contract).
        unsafe { put(request, h) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Isendrecv_replace_c(
    buf: *mut u8,
    count: i64,
    dt: Handle,
    dest: c_int,
    sendtag: c_int,
    source: c_int,
    recvtag: c_int,
    ch: Handle,
    request: *mut Handle,
) -> c_int {
    let Ok(n) = c_int::try_from(count) else {
        return raise(
            ch,
            "MPI_Isendrecv_replace_c",
            Fail::new(ERR_COUNT, "count above 2^31 - 1"),
        );
    };
    // SAFETY: the same contract.
    unsafe { MPI_Isendrecv_replace(buf, n, dt, dest, sendtag, source, recvtag, ch, request) }
}

// ------------------------------------------------------------ some

/// Complete whichever of `reqs` are complete (waiting until one is, if
/// `wait`): their indices and statuses; `MPI_UNDEFINED` if none is active.
unsafe fn some(
    count: c_int,
    reqs: *mut Handle,
    outcount: *mut c_int,
    indices: *mut c_int,
    statuses: *mut Status,
    wait: bool,
) -> Result<()> {
    let n = usize::try_from(count).map_err(|_| Fail::new(ERR_COUNT, "count is negative"))?;
    // SAFETY: `count` requests (the contract).
    let Some(done) = (unsafe { completed(reqs, n, usize::MAX, wait) })? else {
        // SAFETY: the contract.
        unsafe { put(outcount, UNDEFINED) };
        return Ok(());
    };
    for (k, &i) in done.iter().enumerate() {
        // SAFETY: `count` requests, indices and statuses (the contract).
        unsafe {
            if !indices.is_null() {
                *indices.add(k) = i as c_int;
            }
            wait_one(reqs.add(i), status_at(statuses, k))?;
        }
    }
    // SAFETY: the contract.
    unsafe { put(outcount, done.len() as c_int) };
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Waitsome(
    incount: c_int,
    reqs: *mut Handle,
    outcount: *mut c_int,
    indices: *mut c_int,
    statuses: *mut Status,
) -> c_int {
    // SAFETY: the contract.
    entry(COMM_WORLD, "MPI_Waitsome", || unsafe {
        some(incount, reqs, outcount, indices, statuses, true)
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Testsome(
    incount: c_int,
    reqs: *mut Handle,
    outcount: *mut c_int,
    indices: *mut c_int,
    statuses: *mut Status,
) -> c_int {
    // SAFETY: the contract.
    entry(COMM_WORLD, "MPI_Testsome", || unsafe {
        some(incount, reqs, outcount, indices, statuses, false)
    })
}

/// The status of request `h`, complete, which stays as it is (the
/// `MPI_Request_get_status` family): a receive's is known once it is
/// complete; any other's is empty.
fn status_of(h: Handle) -> Result<Status> {
    let guard = lock(&REQUESTS);
    if let Some(Request::Gen(g)) = guard.get(h) {
        // The program's query function, run outside the table's lock:
        // its failure is the call's.
        let g = g.clone();
        drop(guard);
        return g.query();
    }
    Ok(guard
        .get(h)
        .and_then(status_in)
        .unwrap_or_else(empty_status))
}

/// The status request `r` completed with, if it is known: a receive's,
/// or an active persistent request's.
fn status_in(r: &Request) -> Option<Status> {
    match r {
        Request::Recv(_, slot) => lock(&slot.done)
            .as_ref()
            .and_then(|r| r.as_ref().ok().copied()),
        Request::Done(s) => Some(*s),
        Request::Persistent(_, Some(active)) => status_in(active),
        _ => None,
    }
}

/// The `i`th of `statuses`, or NULL for `MPI_STATUSES_IGNORE`.
///
/// # Safety
/// `statuses` is NULL or holds more than `i`.
unsafe fn status_at(statuses: *mut Status, i: usize) -> *mut Status {
    if statuses.is_null() {
        statuses
    } else {
        // SAFETY: the contract.
        unsafe { statuses.add(i) }
    }
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Request_get_status(
    request: Handle,
    flag: *mut c_int,
    status: *mut Status,
) -> c_int {
    entry(COMM_WORLD, "MPI_Request_get_status", || {
        let done = request == REQUEST_NULL || ready(request)?;
        // SAFETY: NULL or valid (the contract).
        unsafe { put(flag, c_int::from(done)) };
        if done {
            // SAFETY: NULL or valid (the contract).
            unsafe { set_status(status, status_of(request)?) };
        }
        Ok(())
    })
}

/// MPI-4.1's `MPI_Testany` that leaves the request as it is.
#[no_mangle]
pub unsafe extern "C" fn MPI_Request_get_status_any(
    count: c_int,
    reqs: *const Handle,
    index: *mut c_int,
    flag: *mut c_int,
    status: *mut Status,
) -> c_int {
    entry(COMM_WORLD, "MPI_Request_get_status_any", || {
        let n = usize::try_from(count).map_err(|_| Fail::new(ERR_COUNT, "count is negative"))?;
        // SAFETY: `count` requests, only read; the outputs as MPI says.
        unsafe {
            match completed(reqs.cast_mut(), n, 1, false)? {
                Some(v) if !v.is_empty() => {
                    put(flag, 1);
                    put(index, v[0] as c_int);
                    set_status(status, status_of(*reqs.add(v[0]))?);
                }
                // None active counts as complete, with an empty status.
                none => {
                    put(flag, c_int::from(none.is_none()));
                    put(index, UNDEFINED);
                    if none.is_none() {
                        set_status(status, empty_status());
                    }
                }
            }
        }
        Ok(())
    })
}

/// MPI-4.1's `MPI_Testall` that leaves the requests as they are.
#[no_mangle]
pub unsafe extern "C" fn MPI_Request_get_status_all(
    count: c_int,
    reqs: *const Handle,
    flag: *mut c_int,
    statuses: *mut Status,
) -> c_int {
    entry(COMM_WORLD, "MPI_Request_get_status_all", || {
        let n = usize::try_from(count).map_err(|_| Fail::new(ERR_COUNT, "count is negative"))?;
        let mut all = true;
        for i in 0..n {
            // SAFETY: `count` requests (the contract).
            let h = unsafe { *reqs.add(i) };
            all &= inactive(h) || ready(h)?;
        }
        // SAFETY: NULL or valid (the contract).
        unsafe { put(flag, c_int::from(all)) };
        if all {
            for i in 0..n {
                // SAFETY: `count` requests and statuses (the contract).
                unsafe { set_status(status_at(statuses, i), status_of(*reqs.add(i))?) };
            }
        }
        Ok(())
    })
}

/// MPI-4.1's `MPI_Testsome` that leaves the requests as they are.
#[no_mangle]
pub unsafe extern "C" fn MPI_Request_get_status_some(
    incount: c_int,
    reqs: *const Handle,
    outcount: *mut c_int,
    indices: *mut c_int,
    statuses: *mut Status,
) -> c_int {
    entry(COMM_WORLD, "MPI_Request_get_status_some", || {
        let n =
            usize::try_from(incount).map_err(|_| Fail::new(ERR_COUNT, "incount is negative"))?;
        // SAFETY: `incount` requests, only read (the contract).
        let Some(done) = (unsafe { completed(reqs.cast_mut(), n, usize::MAX, false) })? else {
            // SAFETY: NULL or valid (the contract).
            unsafe { put(outcount, UNDEFINED) };
            return Ok(());
        };
        for (k, &i) in done.iter().enumerate() {
            // SAFETY: `incount` requests, indices and statuses (the
            // contract).
            unsafe {
                if !indices.is_null() {
                    *indices.add(k) = i as c_int;
                }
                set_status(status_at(statuses, k), status_of(*reqs.add(i))?);
            }
        }
        // SAFETY: NULL or valid (the contract).
        unsafe { put(outcount, done.len() as c_int) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Cancel(request: *mut Handle) -> c_int {
    entry(COMM_WORLD, "MPI_Cancel", || {
        if request.is_null() {
            return Err(Fail::arg("request is NULL"));
        }
        // SAFETY: non-NULL, valid (the contract).
        let h = unsafe { *request };
        let guard = lock(&REQUESTS);
        // A generalized request's cancel function says what it means.
        if let Some(Request::Gen(g)) = guard.get(h) {
            let g = g.clone();
            drop(guard);
            return g.cancel();
        }
        // A receive not yet matched is withdrawn and completes cancelled;
        // a send has left (sends are eager) and completes as sent.
        if let Some(Request::Recv(c, slot)) = guard.get(h) {
            let (c, slot) = (c.clone(), slot.clone());
            drop(guard);
            c.matcher.cancel(&slot);
            let mut s = Status::new(slot.src, slot.tag, 0);
            s.internal[2] = 1;
            slot.complete(Ok(s));
        }
        Ok(())
    })
}

// ------------------------------------------------------------ status

#[no_mangle]
pub unsafe extern "C" fn MPI_Test_cancelled(status: *const Status, flag: *mut c_int) -> c_int {
    if status.is_null() {
        return raise(
            COMM_WORLD,
            "MPI_Test_cancelled",
            Fail::arg("status is NULL"),
        );
    }
    // SAFETY: non-NULL, valid; `flag` NULL or valid (the contract).
    unsafe { put(flag, c_int::from((*status).internal[2] != 0)) };
    SUCCESS
}

macro_rules! status_set {
    ($($name:ident: $field:ident),*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name(status: *mut Status, v: c_int) -> c_int {
            if status.is_null() {
                return raise(COMM_WORLD, stringify!($name), Fail::arg("status is NULL"));
            }
            // SAFETY: non-NULL, valid (the contract).
            unsafe { (*status).$field = v };
            SUCCESS
        }
    )*};
}

status_set!(MPI_Status_set_source: source, MPI_Status_set_tag: tag, MPI_Status_set_error: error);

#[no_mangle]
pub unsafe extern "C" fn MPI_Status_set_cancelled(status: *mut Status, flag: c_int) -> c_int {
    if status.is_null() {
        return raise(
            COMM_WORLD,
            "MPI_Status_set_cancelled",
            Fail::arg("status is NULL"),
        );
    }
    // SAFETY: non-NULL, valid (the contract).
    unsafe { (*status).internal[2] = c_int::from(flag != 0) };
    SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Status_set_elements_c(
    status: *mut Status,
    dt: Handle,
    count: i64,
) -> c_int {
    entry(COMM_WORLD, "MPI_Status_set_elements", || {
        if status.is_null() {
            return Err(Fail::arg("status is NULL"));
        }
        let size = type_of(dt)?.size as i64;
        let bytes = u64::try_from(count.saturating_mul(size))
            .map_err(|_| Fail::new(ERR_COUNT, "count is negative"))?;
        // SAFETY: non-NULL, valid (the contract).
        unsafe {
            (*status).internal[0] = bytes as u32 as c_int;
            (*status).internal[1] = (bytes >> 32) as u32 as c_int;
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Status_set_elements(
    status: *mut Status,
    dt: Handle,
    count: c_int,
) -> c_int {
    // SAFETY: the same contract.
    unsafe { MPI_Status_set_elements_c(status, dt, i64::from(count)) }
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Status_set_elements_x(
    status: *mut Status,
    dt: Handle,
    count: i64,
) -> c_int {
    // SAFETY: the same contract.
    unsafe { MPI_Status_set_elements_c(status, dt, count) }
}

// ------------------------------------------------------------ matched probes

/// A message `MPI_Mprobe` took off its communicator's queue, for the
/// one `MPI_Mrecv` that takes it.
struct Taken {
    comm: Arc<Comm>,
    src: u32,
    tag: c_int,
    msg: Payload,
}

static MESSAGES: Mutex<Option<HashMap<Handle, Taken>>> = Mutex::new(None);
const MESSAGE_NULL: Handle = 0x128;
const MESSAGE_NO_PROC: Handle = 0x129;

impl Matcher {
    /// Take the first unexpected message matching `src` and `tag`.
    fn take(&self, comm: &Arc<Comm>, src: c_int, tag: c_int) -> Option<Taken> {
        let mut q = self.queues();
        let i = q.unexpected.iter().position(|u| {
            (src == ANY_SOURCE || src == u.src as c_int) && (tag == ANY_TAG || tag == u.tag)
        })?;
        q.unexpected.remove(i).map(|u| Taken {
            comm: comm.clone(),
            src: u.src,
            tag: u.tag,
            msg: u.msg,
        })
    }
}

/// A matched probe: wait (or not) for a message matching `source` and
/// `tag`, take it, and name it by a message handle.
unsafe fn mprobe(
    ch: Handle,
    source: c_int,
    tag: c_int,
    message: *mut Handle,
    status: *mut Status,
    wait: bool,
) -> Result<bool> {
    if message.is_null() {
        return Err(Fail::arg("message is NULL"));
    }
    let c = comm(ch)?;
    probe_args(&c, source, tag)?;
    if source == PROC_NULL {
        // SAFETY: the contract.
        unsafe {
            put(message, MESSAGE_NO_PROC);
            set_status(status, proc_null_status());
        }
        return Ok(true);
    }
    let want = Want {
        src: source,
        slot: None,
    };
    if wait {
        wait_until(&c, want, || c.matcher.peek(source, tag).is_some())?;
    } else if c.matcher.peek(source, tag).is_none() {
        pull(&c, want, Duration::ZERO, || {
            c.matcher.peek(source, tag).is_some()
        })?;
    }
    let Some(t) = c.matcher.take(&c, source, tag) else {
        return Ok(false);
    };
    let s = Status::new(
        t.src as c_int,
        t.tag,
        split(&t.msg).map_or(0, |m| m.2.len()),
    );
    let h = crate::state::new_handle();
    lock(&MESSAGES)
        .get_or_insert_with(HashMap::new)
        .insert(h, t);
    // SAFETY: the contract.
    unsafe {
        put(message, h);
        set_status(status, s);
    }
    Ok(true)
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Mprobe(
    source: c_int,
    tag: c_int,
    ch: Handle,
    message: *mut Handle,
    status: *mut Status,
) -> c_int {
    entry(ch, "MPI_Mprobe", || {
        // SAFETY: the contract.
        unsafe { mprobe(ch, source, tag, message, status, true) }.map(drop)
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Improbe(
    source: c_int,
    tag: c_int,
    ch: Handle,
    flag: *mut c_int,
    message: *mut Handle,
    status: *mut Status,
) -> c_int {
    entry(ch, "MPI_Improbe", || {
        // SAFETY: the contract.
        let found = unsafe { mprobe(ch, source, tag, message, status, false) }?;
        // SAFETY: NULL or valid (the contract).
        unsafe { put(flag, c_int::from(found)) };
        Ok(())
    })
}

/// Receive the message `*message` names into `count` elements of `dt`
/// at `buf`.
unsafe fn mrecv(buf: *mut u8, count: i64, dt: Handle, message: *mut Handle) -> Result<Status> {
    if message.is_null() {
        return Err(Fail::arg("message is NULL"));
    }
    // SAFETY: non-NULL, valid (the contract).
    let h = unsafe { *message };
    // SAFETY: as above.
    unsafe { *message = MESSAGE_NULL };
    if h == MESSAGE_NO_PROC {
        return Ok(proc_null_status());
    }
    let t = lock(&MESSAGES)
        .as_mut()
        .and_then(|m| m.remove(&h))
        .ok_or_else(|| Fail::new(ERR_REQUEST, format!("{h:#x} is not a message")))?;
    let count = usize::try_from(count).map_err(|_| Fail::new(ERR_COUNT, "count is negative"))?;
    let slot = Slot::new(t.src as c_int, t.tag, buf as usize, count, TypeRef::of(dt)?);
    let (_, sync, data) = split(&t.msg).unwrap_or((0, None, &[]));
    slot.fill(t.src, t.tag, data);
    ack(&t.comm, sync.map(|id| (t.src, id)));
    let r = lock(&slot.done).take();
    r.unwrap_or_else(|| Err(Fail::new(ERR_INTERN, "a matched receive did not complete")))
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Mrecv(
    buf: *mut u8,
    count: c_int,
    dt: Handle,
    message: *mut Handle,
    status: *mut Status,
) -> c_int {
    // SAFETY: the same contract.
    unsafe { MPI_Mrecv_c(buf, i64::from(count), dt, message, status) }
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Mrecv_c(
    buf: *mut u8,
    count: i64,
    dt: Handle,
    message: *mut Handle,
    status: *mut Status,
) -> c_int {
    entry(COMM_WORLD, "MPI_Mrecv", || {
        // SAFETY: the contract.
        let s = unsafe { mrecv(buf, count, dt, message) }?;
        // SAFETY: NULL or valid (the contract).
        unsafe { set_status(status, s) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Imrecv(
    buf: *mut u8,
    count: c_int,
    dt: Handle,
    message: *mut Handle,
    request: *mut Handle,
) -> c_int {
    // SAFETY: the same contract.
    unsafe { MPI_Imrecv_c(buf, i64::from(count), dt, message, request) }
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Imrecv_c(
    buf: *mut u8,
    count: i64,
    dt: Handle,
    message: *mut Handle,
    request: *mut Handle,
) -> c_int {
    entry(COMM_WORLD, "MPI_Imrecv", || {
        start_request(request, || {
            // The message is here already: the receive completes at once.
            // SAFETY: the contract.
            let s = unsafe { mrecv(buf, count, dt, message) }?;
            add_request(Request::Done(s))
        })
    })
}

macro_rules! status_get {
    ($($name:ident: $field:ident),*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name(status: *const Status, v: *mut c_int) -> c_int {
            if status.is_null() {
                return raise(COMM_WORLD, stringify!($name), Fail::arg("status is NULL"));
            }
            // SAFETY: non-NULL, valid; `v` NULL or valid (the contract).
            unsafe { put(v, (*status).$field) };
            SUCCESS
        }
    )*};
}

status_get!(MPI_Status_get_source: source, MPI_Status_get_tag: tag, MPI_Status_get_error: error);

#[no_mangle]
pub unsafe extern "C" fn MPI_Irsend(
    buf: *const u8,
    count: c_int,
    dt: Handle,
    dest: c_int,
    tag: c_int,
    ch: Handle,
    request: *mut Handle,
) -> c_int {
    // SAFETY: the same contract: a ready send is a send here.
    unsafe { MPI_Isend(buf, count, dt, dest, tag, ch, request) }
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Irsend_c(
    buf: *const u8,
    count: i64,
    dt: Handle,
    dest: c_int,
    tag: c_int,
    ch: Handle,
    request: *mut Handle,
) -> c_int {
    match c_int::try_from(count) {
        // SAFETY: the same contract.
        Ok(n) => unsafe { MPI_Isend(buf, n, dt, dest, tag, ch, request) },
        Err(_) => raise(
            ch,
            "MPI_Irsend_c",
            Fail::new(ERR_COUNT, "count above 2^31 - 1"),
        ),
    }
}
