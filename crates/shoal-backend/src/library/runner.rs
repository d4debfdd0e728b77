//! The runner process (`shoal runner`): loads candidates' shared objects and calls their entry
//! points, one request at a time, for as long as its parent keeps its stdin open.
//!
//! It runs the tuned code in its own address space on purpose: whatever that code does (a
//! segfault, a device fault, an endless kernel) kills or hangs this process only, and the
//! Evaluator records the candidate and starts a new runner.
//!
//! Two things are kept across candidates, and they are the point of this mode:
//! - the device context: the next library is loaded *before* the previous one is unloaded, so
//!   the device runtime they share (`libcudart.so`, `libamdhip64.so`) never drops to zero
//!   references and is never torn down;
//! - the prepared problems: up to [`MAX_PREPARED`] states from `shoal_prepare`, most recently
//!   used last; the oldest is released (through the loaded library) when one more is needed.
//!
//! Replies go to the process's original stdout, which is then pointed at stderr, so that a
//! library that prints cannot corrupt the protocol.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::FromRawFd;
use std::time::Instant;

use super::protocol::{Reply, Request, Status};

/// Problems kept prepared at once.
pub const MAX_PREPARED: usize = 8;
/// Bytes of the `err` buffer handed to the entry points.
const ERR_LEN: usize = 4096;
/// The ABI version this runner speaks (`SHOAL_KERNEL_ABI` in include/shoal_kernel.h).
pub const ABI_VERSION: c_int = 1;

type AbiVersionFn = unsafe extern "C" fn() -> c_int;
type PrepareFn = unsafe extern "C" fn(*const c_char, *mut c_char, usize) -> *mut c_void;
type RunFn = unsafe extern "C" fn(
    *mut c_void,
    *const c_char,
    c_int,
    c_int,
    *mut f64,
    *mut c_char,
    usize,
) -> c_int;
type ReleaseFn = unsafe extern "C" fn(*mut c_void);

/// One loaded shared object and its entry points.
struct Library {
    path: String,
    handle: *mut c_void,
    prepare: PrepareFn,
    run: RunFn,
    release: ReleaseFn,
}

/// Why a candidate's shared object was not made the loaded library.
#[derive(Debug, thiserror::Error)]
enum LoadError {
    #[error("path `{path}` contains NUL")]
    Nul { path: String },
    /// `dlopen` failed; `reason` is `dlerror`'s.
    #[error("cannot load {path}: {reason}")]
    Open { path: String, reason: String },
    #[error(
        "{path} does not export `{symbol}` (see include/shoal_kernel.h; C++ needs extern \"C\")"
    )]
    NoSymbol { path: String, symbol: &'static str },
    #[error(
        "{path} speaks Shoal kernel ABI {version}; this runner speaks {abi}",
        abi = ABI_VERSION
    )]
    Abi { path: String, version: c_int },
}

/// Why a problem has no prepared state.
#[derive(Debug, thiserror::Error)]
enum PrepareError {
    #[error("problem contains NUL")]
    Nul,
    #[error("shoal_prepare returned NULL without a message")]
    Null,
    /// The library's own message from `shoal_prepare`.
    #[error("{0}")]
    Library(String),
}

fn dl_error() -> String {
    // SAFETY: dlerror returns a thread-local C string or null.
    unsafe {
        let e = libc::dlerror();
        if e.is_null() {
            "unknown dynamic loader error".into()
        } else {
            CStr::from_ptr(e).to_string_lossy().into_owned()
        }
    }
}

impl Library {
    fn open(path: &str) -> Result<Library, LoadError> {
        let path_of = || path.to_string();
        let c_path = CString::new(path).map_err(|_| LoadError::Nul { path: path_of() })?;
        // SAFETY: dlopen runs the library's constructors: that is tuned code, which is why it
        // runs in this process and not in the Evaluator.
        let handle = unsafe { libc::dlopen(c_path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if handle.is_null() {
            return Err(LoadError::Open {
                path: path_of(),
                reason: dl_error(),
            });
        }
        let close = |e: LoadError| {
            // SAFETY: the handle came from dlopen and nothing from it is in use.
            unsafe { libc::dlclose(handle) };
            Err(e)
        };
        let sym = |symbol: &'static str| -> Result<*mut c_void, LoadError> {
            let c_name = CString::new(symbol).expect("no NUL in symbol names");
            // SAFETY: dlsym on a live handle.
            let p = unsafe { libc::dlsym(handle, c_name.as_ptr()) };
            if p.is_null() {
                Err(LoadError::NoSymbol {
                    path: path_of(),
                    symbol,
                })
            } else {
                Ok(p)
            }
        };
        let syms = (|| {
            Ok::<_, LoadError>((
                sym("shoal_abi_version")?,
                sym("shoal_prepare")?,
                sym("shoal_run")?,
                sym("shoal_release")?,
            ))
        })();
        let (abi, prepare, run, release) = match syms {
            Ok(s) => s,
            Err(e) => return close(e),
        };
        // SAFETY: the symbols are the documented entry points; their types are the ABI's.
        let (abi, prepare, run, release) = unsafe {
            (
                std::mem::transmute::<*mut c_void, AbiVersionFn>(abi),
                std::mem::transmute::<*mut c_void, PrepareFn>(prepare),
                std::mem::transmute::<*mut c_void, RunFn>(run),
                std::mem::transmute::<*mut c_void, ReleaseFn>(release),
            )
        };
        // SAFETY: calling the library's own function.
        let version = unsafe { abi() };
        if version != ABI_VERSION {
            return close(LoadError::Abi {
                path: path_of(),
                version,
            });
        }
        Ok(Library {
            path: path.to_string(),
            handle,
            prepare,
            run,
            release,
        })
    }
}

impl Drop for Library {
    fn drop(&mut self) {
        // SAFETY: the handle came from dlopen; no pointer into the library outlives it (the
        // prepared states are plain memory of the shared device runtime).
        unsafe { libc::dlclose(self.handle) };
    }
}

fn err_text(buf: &[u8]) -> String {
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).trim().to_string()
}

/// The runner's state between requests.
#[derive(Default)]
struct Runner {
    library: Option<Library>,
    /// (problem, state), least recently used first.
    prepared: Vec<(String, *mut c_void)>,
}

impl Runner {
    /// Makes `path` the loaded library; the previous one is closed only after the new one is
    /// open, so the device runtime they share stays loaded.
    fn load(&mut self, path: &str) -> Result<f64, LoadError> {
        if self.library.as_ref().is_some_and(|l| l.path == path) {
            return Ok(0.0);
        }
        let start = Instant::now();
        let next = Library::open(path)?;
        let previous = self.library.replace(next);
        drop(previous);
        Ok(start.elapsed().as_secs_f64() * 1e6)
    }

    /// The prepared state of `problem`, preparing it (and releasing the oldest) when needed.
    fn prepared(&mut self, problem: &str) -> Result<(*mut c_void, f64), PrepareError> {
        let lib = self.library.as_ref().expect("a library is loaded");
        if let Some(i) = self.prepared.iter().position(|(p, _)| p == problem) {
            let entry = self.prepared.remove(i);
            let state = entry.1;
            self.prepared.push(entry);
            return Ok((state, 0.0));
        }
        if self.prepared.len() >= MAX_PREPARED {
            let (_, oldest) = self.prepared.remove(0);
            // SAFETY: a state from shoal_prepare of a library built from the same sources.
            unsafe { (lib.release)(oldest) };
        }
        let c_problem = CString::new(problem).map_err(|_| PrepareError::Nul)?;
        let mut err = vec![0u8; ERR_LEN];
        let start = Instant::now();
        // SAFETY: the ABI's prepare with a NUL-terminated problem and an err buffer of ERR_LEN.
        let state = unsafe { (lib.prepare)(c_problem.as_ptr(), err.as_mut_ptr().cast(), ERR_LEN) };
        let took = start.elapsed().as_secs_f64() * 1e6;
        if state.is_null() {
            let msg = err_text(&err);
            return Err(if msg.is_empty() {
                PrepareError::Null
            } else {
                PrepareError::Library(msg)
            });
        }
        self.prepared.push((problem.to_string(), state));
        Ok((state, took))
    }

    fn handle(&mut self, req: &Request) -> Reply {
        let load_us = match self.load(&req.library) {
            Ok(us) => us,
            Err(e) => return Reply::failed(Status::LoadFailed, e.to_string()),
        };
        let (state, prepare_us) = match self.prepared(&req.problem) {
            Ok(s) => s,
            Err(e) => {
                return Reply::failed(
                    Status::PrepareFailed,
                    format!("shoal_prepare({}): {e}", req.problem),
                )
            }
        };
        let lib = self.library.as_ref().expect("loaded above");
        let Ok(c_run) = CString::new(req.run_params.as_str()) else {
            return Reply::failed(Status::Error, "run parameters contain NUL");
        };
        let repeat = req.repeat.max(1);
        let mut samples = vec![f64::NAN; repeat as usize];
        let mut err = vec![0u8; ERR_LEN];
        // SAFETY: the ABI's run with a state from prepare, `repeat` sample slots and an err
        // buffer of ERR_LEN bytes.
        let code = unsafe {
            (lib.run)(
                state,
                c_run.as_ptr(),
                req.warmup as c_int,
                repeat as c_int,
                samples.as_mut_ptr(),
                err.as_mut_ptr().cast(),
                ERR_LEN,
            )
        };
        let message = err_text(&err);
        let status = match code {
            0 => Status::Pass,
            1 => Status::WrongAnswer,
            2 => Status::Fatal,
            3 => Status::NotApplicable,
            other => {
                return Reply::failed(
                    Status::Fatal,
                    format!("shoal_run returned {other}, which the ABI does not define; {message}"),
                )
            }
        };
        if status == Status::Pass {
            if let Some(bad) = samples.iter().find(|s| !(s.is_finite() && **s >= 0.0)) {
                return Reply::failed(
                    Status::Error,
                    format!("shoal_run passed but left a sample of {bad} µs (every one of the {repeat} samples must be a time)"),
                );
            }
        }
        Reply {
            status,
            samples_us: if status == Status::Pass {
                samples
            } else {
                Vec::new()
            },
            message,
            load_us,
            prepare_us,
        }
    }
}

/// The runner's main loop; returns the process exit code. Reads requests from stdin until it
/// closes (the Evaluator went away), and exits after a fatal reply (the device context may be
/// unusable, and releasing states through it could hang).
pub fn main() -> i32 {
    // SAFETY: dup/dup2 on the standard descriptors before any other thread exists.
    let reply_fd = unsafe {
        let fd = libc::dup(1);
        if fd < 0 || libc::dup2(2, 1) < 0 {
            eprintln!(
                "shoal runner: cannot set up the reply pipe: {}",
                std::io::Error::last_os_error()
            );
            return 2;
        }
        fd
    };
    // SAFETY: reply_fd is a fresh descriptor owned by nothing else.
    let mut replies = unsafe { File::from_raw_fd(reply_fd) };
    let mut runner = Runner::default();
    let stdin = BufReader::new(std::io::stdin());
    for line in stdin.lines() {
        let Ok(line) = line else { break };
        if line.trim().is_empty() {
            continue;
        }
        let reply = match serde_json::from_str::<Request>(&line) {
            Ok(req) => runner.handle(&req),
            Err(e) => Reply::failed(Status::Error, format!("malformed request: {e}")),
        };
        let mut text = serde_json::to_string(&reply).expect("a reply serializes");
        text.push('\n');
        if replies.write_all(text.as_bytes()).is_err() {
            break;
        }
        let _ = std::io::stdout().flush();
        if reply.status == Status::Fatal {
            // SAFETY: _exit skips atexit handlers and destructors, which could block on a
            // device context the fault left broken.
            unsafe { libc::_exit(3) };
        }
    }
    if let Some(lib) = runner.library.as_ref() {
        for (_, state) in runner.prepared.drain(..) {
            // SAFETY: states from shoal_prepare of this library's sources.
            unsafe { (lib.release)(state) };
        }
    }
    0
}
