//! The environment: initialisation and finalisation, versions, clocks,
//! errors and their handlers, and communicators.

use crate::consts::*;
use crate::p2p::Sender;
use crate::state::{self, comm, entry, mpi, phase, Comm, Fail, Mpi, Phase, Result};
use crate::{put, write_string, Handle};
use std::ffi::{c_char, c_int, CStr};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, OnceLock};

/// The thread that called `MPI_Init`.
static MAIN: OnceLock<std::thread::ThreadId> = OnceLock::new();

/// Form the world as `Node::from_env()` does (meshrun, srun, torchrun,
/// Kubernetes, `RANK`/`WORLD`/`PEERS`; alone, a world of one).
fn init(required: c_int) -> Result<c_int> {
    let mut ph = phase();
    match &*ph {
        Phase::Running(_) => return Err(Fail::new(ERR_OTHER, "MPI_Init was already called")),
        Phase::Finalized => {
            return Err(Fail::new(
                ERR_OTHER,
                "MPI_Init after MPI_Finalize: MPI cannot start again",
            ))
        }
        Phase::Fresh => {}
    }
    let group = mw::Node::from_env()?.connect()?;
    let alone = mw::local(1)?
        .pop()
        .ok_or_else(|| Fail::new(ERR_INTERN, "no group of one"))?;
    let me = group.rank();
    let all = (0..group.world_size()).collect();
    let world = Comm::new(group, "MPI_COMM_WORLD", ERRORS_ARE_FATAL, all);
    let selfc = Comm::new(alone, "MPI_COMM_SELF", ERRORS_ARE_FATAL, vec![me]);
    // Every call may come from any thread: the groups and this library's
    // tables are shared safely. The level given is the first of MPI's at
    // or above the one asked for.
    let level = [THREAD_SINGLE, THREAD_FUNNELED, THREAD_SERIALIZED]
        .into_iter()
        .find(|&l| required <= l)
        .unwrap_or(THREAD_MULTIPLE);
    let running = Phase::Running(Arc::new(Mpi {
        world,
        selfc,
        comms: Mutex::new(Default::default()),
        sender: Sender::start(),
        thread_level: level,
    }));
    state::set_running(&mut ph, running);
    let _ = MAIN.set(std::thread::current().id());
    origin();
    Ok(level)
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Init(_argc: *mut c_int, _argv: *mut *mut *mut c_char) -> c_int {
    entry(COMM_WORLD, "MPI_Init", || init(THREAD_SINGLE).map(drop))
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Init_thread(
    _argc: *mut c_int,
    _argv: *mut *mut *mut c_char,
    required: c_int,
    provided: *mut c_int,
) -> c_int {
    entry(COMM_WORLD, "MPI_Init_thread", || {
        let level = init(required)?;
        // SAFETY: NULL or valid (the contract).
        unsafe { put(provided, level) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Finalize() -> c_int {
    entry(COMM_WORLD, "MPI_Finalize", || {
        let m = mpi()?;
        m.sender.drain();
        // A collective, as MPI's is: no rank leaves while another may
        // still send to it.
        let ended = m.world.group.barrier().map_err(Fail::from);
        let comms: Vec<Arc<Comm>> = m
            .comms
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain()
            .map(|(_, c)| c)
            .collect();
        for c in comms {
            let _ = c.group.shutdown();
        }
        let _ = m.selfc.group.shutdown();
        let shut = m.world.group.shutdown().map_err(Fail::from);
        state::set_running(&mut phase(), Phase::Finalized);
        ended.and(shut)
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Initialized(flag: *mut c_int) -> c_int {
    let running = !matches!(*phase(), Phase::Fresh);
    // SAFETY: NULL or valid (the contract).
    unsafe { put(flag, c_int::from(running)) };
    SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Finalized(flag: *mut c_int) -> c_int {
    let done = matches!(*phase(), Phase::Finalized);
    // SAFETY: NULL or valid (the contract).
    unsafe { put(flag, c_int::from(done)) };
    SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Abort(ch: Handle, code: c_int) -> c_int {
    let rank = mpi()
        .map(|m| m.world.rank().to_string())
        .unwrap_or_else(|_| "?".into());
    eprintln!("meshwork MPI (rank {rank}): MPI_Abort on communicator {ch:#x} with code {code}");
    // The others see this rank gone and fail their calls naming it.
    std::process::exit(code.clamp(1, 255))
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Query_thread(provided: *mut c_int) -> c_int {
    entry(COMM_WORLD, "MPI_Query_thread", || {
        // SAFETY: NULL or valid (the contract).
        unsafe { put(provided, mpi()?.thread_level) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Is_thread_main(flag: *mut c_int) -> c_int {
    let main = MAIN
        .get()
        .is_some_and(|t| *t == std::thread::current().id());
    // SAFETY: NULL or valid (the contract).
    unsafe { put(flag, c_int::from(main)) };
    SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Get_version(version: *mut c_int, subversion: *mut c_int) -> c_int {
    // SAFETY: NULL or valid (the contract).
    unsafe {
        put(version, 5);
        put(subversion, 0);
    }
    SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Abi_get_version(major: *mut c_int, minor: *mut c_int) -> c_int {
    // SAFETY: NULL or valid (the contract).
    unsafe {
        put(major, 1);
        put(minor, 0);
    }
    SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Get_library_version(out: *mut c_char, len: *mut c_int) -> c_int {
    let v = format!(
        "meshwork {} (MPI 5.0 standard ABI 1.0 over meshwork process groups)",
        env!("CARGO_PKG_VERSION")
    );
    // SAFETY: MPI_MAX_LIBRARY_VERSION_STRING bytes (the contract).
    unsafe { write_string(&v, out, MAX_LIBRARY_VERSION_STRING, len) };
    SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Get_processor_name(out: *mut c_char, len: *mut c_int) -> c_int {
    let name = host_name().unwrap_or_else(|| "localhost".into());
    // SAFETY: MPI_MAX_PROCESSOR_NAME bytes (the contract).
    unsafe { write_string(&name, out, MAX_PROCESSOR_NAME, len) };
    SUCCESS
}

/// This host's name, if it has one to say.
pub(crate) fn host_name() -> Option<String> {
    let mut buf = [0u8; 256];
    // SAFETY: `buf` is writable for its length, less a NUL kept.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len() - 1) };
    let name = CStr::from_bytes_until_nul(&buf).ok().filter(|_| rc == 0)?;
    Some(name.to_string_lossy().into_owned())
}

/// The monotonic clock: (seconds, nanoseconds).
fn monotonic() -> (i64, i64) {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec to fill; CLOCK_MONOTONIC always exists on
    // Linux, so the call cannot fail.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec, ts.tv_nsec)
}

/// `MPI_Wtime`'s origin: the monotonic clock's whole seconds when it was
/// first read (by `MPI_Init`, or an earlier `MPI_Wtime`), so that the
/// seconds it gives stay small and a double keeps their nanoseconds.
fn origin() -> i64 {
    static ORIGIN: OnceLock<i64> = OnceLock::new();
    *ORIGIN.get_or_init(|| monotonic().0)
}

/// Seconds since the origin, read straight off the clock: a timing loop
/// (OSU's reads it twice a round trip) pays a clock read and a few
/// instructions, not `Instant`'s checked arithmetic.
#[no_mangle]
pub extern "C" fn MPI_Wtime() -> f64 {
    let (s, ns) = monotonic();
    (s - origin()) as f64 + ns as f64 * 1e-9
}

#[no_mangle]
pub extern "C" fn MPI_Wtick() -> f64 {
    1e-9
}

/// `MPI_Pcontrol(level, ...)`: the profiling interface's hook, which a
/// tool defines; the library's own does nothing. Declared variadic in
/// `mpi.h`: the arguments after `level` are read by no one, which the C
/// calling conventions meshwork runs on allow.
#[no_mangle]
pub extern "C" fn MPI_Pcontrol(_level: c_int) -> c_int {
    SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Error_string(code: c_int, out: *mut c_char, len: *mut c_int) -> c_int {
    match state::describe(code) {
        Some((_, text)) => {
            // SAFETY: MPI_MAX_ERROR_STRING bytes (the contract).
            unsafe { write_string(&text, out, MAX_ERROR_STRING, len) };
            SUCCESS
        }
        None => ERR_ARG,
    }
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Error_class(code: c_int, class: *mut c_int) -> c_int {
    match state::describe(code) {
        Some((c, _)) => {
            // SAFETY: NULL or valid (the contract).
            unsafe { put(class, c) };
            SUCCESS
        }
        _ => ERR_ARG,
    }
}

fn handler(h: Handle) -> Result<Handle> {
    match h {
        ERRORS_ARE_FATAL | ERRORS_ABORT | ERRORS_RETURN => Ok(h),
        _ if state::user_handler(h).is_some() => Ok(h),
        _ => Err(Fail::arg(format!(
            "error handler {h:#x} is neither MPI's (MPI_ERRORS_ARE_FATAL, MPI_ERRORS_ABORT, MPI_ERRORS_RETURN) nor one MPI_Comm_create_errhandler made"
        ))),
    }
}

/// `MPI_Comm_create_errhandler`: a handler of the program's, called with
/// the communicator and the error code; the call that failed then
/// returns the code.
#[no_mangle]
pub unsafe extern "C" fn MPI_Comm_create_errhandler(
    f: Option<state::UserHandler>,
    out: *mut Handle,
) -> c_int {
    entry(COMM_WORLD, "MPI_Comm_create_errhandler", || {
        let f = f.ok_or_else(|| Fail::arg("the handler function is NULL"))?;
        if out.is_null() {
            return Err(Fail::arg("errhandler is NULL"));
        }
        // SAFETY: non-NULL, valid (the contract).
        unsafe { put(out, state::add_user_handler(f)) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Comm_set_errhandler(ch: Handle, h: Handle) -> c_int {
    entry(ch, "MPI_Comm_set_errhandler", || {
        comm(ch)?.errhandler.store(handler(h)?, Ordering::Relaxed);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Comm_get_errhandler(ch: Handle, out: *mut Handle) -> c_int {
    entry(ch, "MPI_Comm_get_errhandler", || {
        let h = comm(ch)?.errhandler.load(Ordering::Relaxed);
        // SAFETY: NULL or valid (the contract).
        unsafe { put(out, h) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Comm_call_errhandler(ch: Handle, code: c_int) -> c_int {
    // The program's handler gets the code as given.
    if state::call_user_handler(ch, code) {
        return SUCCESS;
    }
    let (class, text) = state::describe(code).unwrap_or((ERR_OTHER, format!("error code {code}")));
    state::raise(ch, "MPI_Comm_call_errhandler", Fail::new(class, text));
    SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Errhandler_free(h: *mut Handle) -> c_int {
    // SAFETY: NULL or valid (the contract).
    unsafe { put(h, ERRHANDLER_NULL) };
    SUCCESS
}

// ------------------------------------------------------------ communicators

#[no_mangle]
pub unsafe extern "C" fn MPI_Comm_rank(ch: Handle, rank: *mut c_int) -> c_int {
    entry(ch, "MPI_Comm_rank", || {
        let r = comm(ch)?.rank() as c_int;
        // SAFETY: NULL or valid (the contract).
        unsafe { put(rank, r) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Comm_size(ch: Handle, size: *mut c_int) -> c_int {
    entry(ch, "MPI_Comm_size", || {
        let n = comm(ch)?.size() as c_int;
        // SAFETY: NULL or valid (the contract).
        unsafe { put(size, n) };
        Ok(())
    })
}

/// `color` and `key` of `MPI_Comm_split` as meshwork's: `MPI_UNDEFINED`
/// to a color of its own (the group is made and dropped), and keys of
/// any sign kept in order.
pub(crate) fn split(
    ch: Handle,
    color: c_int,
    key: c_int,
    out: *mut Handle,
    name: &str,
) -> Result<()> {
    if out.is_null() {
        return Err(Fail::arg("newcomm is NULL"));
    }
    let m = mpi()?;
    let c = m.comm(ch)?;
    if color < 0 && color != UNDEFINED {
        return Err(Fail::arg(format!("color {color} is negative")));
    }
    let mw_color = if color == UNDEFINED {
        u32::MAX
    } else {
        color as u32
    };
    let mw_key = (key as i64 - i32::MIN as i64) as u32;
    let group = c.group.split(mw_color, mw_key)?;
    let h = if color == UNDEFINED {
        let _ = group.shutdown();
        COMM_NULL
    } else {
        let handler = c.errhandler.load(Ordering::Relaxed);
        // Its members by world rank, for groups and comparisons.
        let me = [m.world.rank()];
        let mut members = vec![0u32; group.world_size() as usize];
        group.all_gather(&me, &mut members)?;
        m.add_comm(Comm::new(group, name, handler, members))
    };
    // SAFETY: non-NULL, valid (the contract).
    unsafe { put(out, h) };
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Comm_split(
    ch: Handle,
    color: c_int,
    key: c_int,
    out: *mut Handle,
) -> c_int {
    entry(ch, "MPI_Comm_split", || split(ch, color, key, out, ""))
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Comm_dup(ch: Handle, out: *mut Handle) -> c_int {
    entry(ch, "MPI_Comm_dup", || {
        let rank = comm(ch)?.rank() as c_int;
        split(ch, 0, rank, out, "")?;
        // SAFETY: written by `split` (the contract).
        let dup = unsafe { *out };
        crate::topo::copy_topology(ch, dup)?;
        crate::attrs::copy_attrs(ch, dup)
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Comm_free(ch: *mut Handle) -> c_int {
    entry(COMM_WORLD, "MPI_Comm_free", || {
        if ch.is_null() {
            return Err(Fail::arg("comm is NULL"));
        }
        // SAFETY: non-NULL, valid (the contract).
        let h = unsafe { *ch };
        if matches!(h, COMM_WORLD | COMM_SELF | COMM_NULL) {
            return Err(Fail::new(
                ERR_COMM,
                "a predefined communicator cannot be freed",
            ));
        }
        let m = mpi()?;
        let c = m
            .comms
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&h)
            .ok_or_else(|| Fail::new(ERR_COMM, format!("{h:#x} is not a communicator")))?;
        crate::attrs::delete_attrs(h, &c);
        let _ = c.group.shutdown();
        // SAFETY: as above.
        unsafe { *ch = COMM_NULL };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Comm_compare(a: Handle, b: Handle, result: *mut c_int) -> c_int {
    entry(a, "MPI_Comm_compare", || {
        let (ca, cb) = (comm(a)?, comm(b)?);
        let r = if Arc::ptr_eq(&ca, &cb) {
            IDENT
        } else {
            crate::attrs::compare_members(&ca.members, &cb.members, CONGRUENT)
        };
        // SAFETY: NULL or valid (the contract).
        unsafe { put(result, r) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Comm_set_name(ch: Handle, name: *const c_char) -> c_int {
    entry(ch, "MPI_Comm_set_name", || {
        if name.is_null() {
            return Err(Fail::arg("comm_name is NULL"));
        }
        // SAFETY: a NUL-terminated string (the contract).
        let s = unsafe { CStr::from_ptr(name) }.to_string_lossy();
        let s: String = s.chars().take(MAX_OBJECT_NAME - 1).collect();
        *comm(ch)?.name.lock().unwrap_or_else(|e| e.into_inner()) = s;
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Comm_get_name(ch: Handle, out: *mut c_char, len: *mut c_int) -> c_int {
    entry(ch, "MPI_Comm_get_name", || {
        // The null handle has a name too (MPI 4.1, §7.8).
        let name = if ch == COMM_NULL {
            "MPI_COMM_NULL".to_string()
        } else {
            comm(ch)?
                .name
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone()
        };
        // SAFETY: MPI_MAX_OBJECT_NAME bytes (the contract).
        unsafe { write_string(&name, out, MAX_OBJECT_NAME, len) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Comm_test_inter(ch: Handle, flag: *mut c_int) -> c_int {
    entry(ch, "MPI_Comm_test_inter", || {
        comm(ch)?;
        // SAFETY: NULL or valid (the contract).
        unsafe { put(flag, 0) };
        Ok(())
    })
}

// ------------------------------------------------------------ info

/// Info objects: key/value lists kept for whoever asks (meshwork reads
/// none of their hints). `MPI_INFO_ENV` is not among them: it is made
/// afresh for each read ([`environment`]).
static INFOS: Mutex<Vec<(Handle, Pairs)>> = Mutex::new(Vec::new());

type Pairs = Vec<(String, String)>;

/// A new info object holding `pairs`: its handle.
fn add_info(pairs: Pairs) -> Handle {
    let h = state::new_handle();
    INFOS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((h, pairs));
    h
}

/// The keys of `MPI_INFO_ENV` (MPI-4.1 §11.2.1) this process can say:
/// how it was started (`command` and `argv`, from `args` or else the
/// process's own command line), how many processes the world has
/// (`maxprocs`) and the thread level it runs at once MPI runs, the host,
/// the architecture and the working directory. (`soft` and `file` have
/// no meaning without `mpiexec`: absent.)
fn environment(args: Option<Vec<String>>) -> Pairs {
    let args = args.unwrap_or_else(|| {
        std::env::args_os()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    });
    let mut pairs = Vec::new();
    if let Some((command, rest)) = args.split_first() {
        pairs.push(("command".into(), command.clone()));
        pairs.push(("argv".into(), rest.join(" ")));
    }
    if let Ok(m) = mpi() {
        pairs.push(("maxprocs".into(), m.world.size().to_string()));
        let level = match m.thread_level {
            THREAD_SINGLE => "MPI_THREAD_SINGLE",
            THREAD_FUNNELED => "MPI_THREAD_FUNNELED",
            THREAD_SERIALIZED => "MPI_THREAD_SERIALIZED",
            _ => "MPI_THREAD_MULTIPLE",
        };
        pairs.push(("thread_level".into(), level.into()));
    }
    if let Some(host) = host_name() {
        pairs.push(("host".into(), host));
    }
    pairs.push(("arch".into(), std::env::consts::ARCH.into()));
    if let Ok(dir) = std::env::current_dir() {
        pairs.push(("wdir".into(), dir.display().to_string()));
    }
    pairs
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Info_create(info: *mut Handle) -> c_int {
    entry(COMM_WORLD, "MPI_Info_create", || {
        // SAFETY: NULL or valid (the contract).
        unsafe { put(info, add_info(Vec::new())) };
        Ok(())
    })
}

/// `MPI_Info_create_env(argc, argv, info)`: a new info object with the
/// keys of `MPI_INFO_ENV`, the command and its arguments from `argv` when
/// given; callable before `MPI_Init`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Info_create_env(
    argc: c_int,
    argv: *const *const c_char,
    info: *mut Handle,
) -> c_int {
    entry(COMM_WORLD, "MPI_Info_create_env", || {
        if info.is_null() {
            return Err(Fail::arg("info is NULL"));
        }
        let n = usize::try_from(argc).unwrap_or(0);
        let args = (!argv.is_null() && n > 0).then(|| {
            (0..n)
                // SAFETY: `argc` strings, NUL-terminated (the contract);
                // a NULL one ends them.
                .map(|i| unsafe { *argv.add(i) })
                .take_while(|a| !a.is_null())
                // SAFETY: as above.
                .map(|a| unsafe { CStr::from_ptr(a) }.to_string_lossy().into_owned())
                .collect()
        });
        // SAFETY: non-NULL, valid (the contract).
        unsafe { put(info, add_info(environment(args))) };
        Ok(())
    })
}

/// `MPI_Get_hw_resource_info(info)` (MPI-4.1): a new info object saying
/// what this process runs on. Its keys are meshwork's own: `host` and
/// `meshwork_cpus`, the processors this process may run on.
#[no_mangle]
pub unsafe extern "C" fn MPI_Get_hw_resource_info(info: *mut Handle) -> c_int {
    entry(COMM_WORLD, "MPI_Get_hw_resource_info", || {
        if info.is_null() {
            return Err(Fail::arg("hw_info is NULL"));
        }
        let mut pairs: Pairs = host_name()
            .map(|h| ("host".into(), h))
            .into_iter()
            .collect();
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        pairs.push(("meshwork_cpus".into(), cpus.to_string()));
        // SAFETY: non-NULL, valid (the contract).
        unsafe { put(info, add_info(pairs)) };
        Ok(())
    })
}

/// `MPI_INFO_ENV` is read, never changed or freed.
fn writable(h: Handle) -> Result<()> {
    if h == INFO_ENV {
        return Err(Fail::new(
            ERR_INFO,
            "MPI_INFO_ENV is predefined: it cannot change",
        ));
    }
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Info_set(
    info: Handle,
    key: *const c_char,
    value: *const c_char,
) -> c_int {
    entry(COMM_WORLD, "MPI_Info_set", || {
        if key.is_null() || value.is_null() {
            return Err(Fail::arg("key or value is NULL"));
        }
        // SAFETY: NUL-terminated strings (the contract).
        let (k, v) = unsafe {
            (
                CStr::from_ptr(key).to_string_lossy().into_owned(),
                CStr::from_ptr(value).to_string_lossy().into_owned(),
            )
        };
        info_put(info, &k, &v)
    })
}

/// Set `key` to `value` in info object `h`.
pub(crate) fn info_put(h: Handle, key: &str, value: &str) -> Result<()> {
    writable(h)?;
    with_info(h, |kv| {
        kv.retain(|(old, _)| old != key);
        kv.push((key.to_string(), value.to_string()));
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Info_free(info: *mut Handle) -> c_int {
    entry(COMM_WORLD, "MPI_Info_free", || {
        if info.is_null() {
            return Err(Fail::arg("info is NULL"));
        }
        // SAFETY: non-NULL, valid (the contract).
        let h = unsafe { *info };
        writable(h)?;
        INFOS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|(i, _)| *i != h);
        // SAFETY: as above.
        unsafe { *info = INFO_NULL };
        Ok(())
    })
}

/// `f` on the pairs of info object `h` (on a copy of `MPI_INFO_ENV`'s,
/// which the callers that change pairs refuse first).
fn with_info<R>(h: Handle, f: impl FnOnce(&mut Pairs) -> Result<R>) -> Result<R> {
    if h == INFO_ENV {
        return f(&mut environment(None));
    }
    let mut infos = INFOS.lock().unwrap_or_else(|e| e.into_inner());
    let (_, kv) = infos
        .iter_mut()
        .find(|(i, _)| *i == h)
        .ok_or_else(|| Fail::new(ERR_INFO, format!("{h:#x} is not an info object")))?;
    f(kv)
}

/// The value of `key` in info object `h`.
fn lookup(h: Handle, key: &str) -> Result<Option<String>> {
    with_info(h, |kv| {
        Ok(kv.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone()))
    })
}

/// The value of `key` in info object `h`; none in `MPI_INFO_NULL`.
pub(crate) fn info_value(h: Handle, key: &str) -> Result<Option<String>> {
    if h == INFO_NULL {
        return Ok(None);
    }
    lookup(h, key)
}

/// A key argument: a C string of at most `MPI_MAX_INFO_KEY - 1` bytes.
///
/// # Safety
/// `key` is NULL or a NUL-terminated string.
unsafe fn key_arg(key: *const c_char) -> Result<String> {
    if key.is_null() {
        return Err(Fail::new(ERR_INFO_KEY, "key is NULL"));
    }
    // SAFETY: NUL-terminated (the contract).
    let k = unsafe { CStr::from_ptr(key) }
        .to_string_lossy()
        .into_owned();
    if k.is_empty() || k.len() >= MAX_INFO_KEY {
        return Err(Fail::new(
            ERR_INFO_KEY,
            format!("a key has 1 to {} bytes, not {}", MAX_INFO_KEY - 1, k.len()),
        ));
    }
    Ok(k)
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Info_get_string(
    info: Handle,
    key: *const c_char,
    buflen: *mut c_int,
    value: *mut c_char,
    flag: *mut c_int,
) -> c_int {
    entry(COMM_WORLD, "MPI_Info_get_string", || {
        // SAFETY: the contract.
        let k = unsafe { key_arg(key) }?;
        if buflen.is_null() {
            return Err(Fail::arg("buflen is NULL"));
        }
        let found = lookup(info, &k)?;
        // SAFETY: NULL or valid (the contract).
        unsafe { put(flag, c_int::from(found.is_some())) };
        if let Some(v) = found {
            // SAFETY: `*buflen` bytes at `value` (the contract).
            unsafe {
                let cap = usize::try_from(*buflen).unwrap_or(0);
                if cap > 0 {
                    write_string(&v, value, cap, std::ptr::null_mut());
                }
                *buflen = c_int::try_from(v.len() + 1).unwrap_or(c_int::MAX);
            }
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Info_get(
    info: Handle,
    key: *const c_char,
    valuelen: c_int,
    value: *mut c_char,
    flag: *mut c_int,
) -> c_int {
    // `valuelen` excludes the NUL that `MPI_Info_get_string`'s length counts.
    let mut n = valuelen.saturating_add(1);
    // SAFETY: the same contract.
    unsafe { MPI_Info_get_string(info, key, &mut n, value, flag) }
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Info_get_valuelen(
    info: Handle,
    key: *const c_char,
    valuelen: *mut c_int,
    flag: *mut c_int,
) -> c_int {
    entry(COMM_WORLD, "MPI_Info_get_valuelen", || {
        // SAFETY: the contract.
        let k = unsafe { key_arg(key) }?;
        let found = lookup(info, &k)?.map(|v| v.len());
        // SAFETY: NULL or valid (the contract).
        unsafe {
            put(flag, c_int::from(found.is_some()));
            if let Some(n) = found {
                put(valuelen, c_int::try_from(n).unwrap_or(c_int::MAX));
            }
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Info_get_nkeys(info: Handle, nkeys: *mut c_int) -> c_int {
    entry(COMM_WORLD, "MPI_Info_get_nkeys", || {
        let n = with_info(info, |kv| Ok(kv.len()))?;
        // SAFETY: NULL or valid (the contract).
        unsafe { put(nkeys, n as c_int) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Info_get_nthkey(info: Handle, n: c_int, key: *mut c_char) -> c_int {
    entry(COMM_WORLD, "MPI_Info_get_nthkey", || {
        let k = with_info(info, |kv| {
            usize::try_from(n)
                .ok()
                .and_then(|i| kv.get(i))
                .map(|(k, _)| k.clone())
                .ok_or_else(|| Fail::arg(format!("key {n} of {} keys", kv.len())))
        })?;
        // SAFETY: MPI_MAX_INFO_KEY bytes at `key` (the contract).
        unsafe { write_string(&k, key, MAX_INFO_KEY, std::ptr::null_mut()) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Info_delete(info: Handle, key: *const c_char) -> c_int {
    entry(COMM_WORLD, "MPI_Info_delete", || {
        // SAFETY: the contract.
        let k = unsafe { key_arg(key) }?;
        writable(info)?;
        with_info(info, |kv| {
            let before = kv.len();
            kv.retain(|(x, _)| *x != k);
            if kv.len() == before {
                return Err(Fail::new(ERR_INFO_NOKEY, format!("no key {k:?}")));
            }
            Ok(())
        })
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Info_dup(info: Handle, out: *mut Handle) -> c_int {
    entry(COMM_WORLD, "MPI_Info_dup", || {
        let pairs = with_info(info, |kv| Ok(kv.clone()))?;
        // SAFETY: NULL or valid (the contract).
        unsafe { put(out, add_info(pairs)) };
        Ok(())
    })
}
