//! The one tokio runtime of the process that runs the stores' requests, and the bridge from
//! corank's threads (readers, writer) to it.

use std::future::Future;
use std::sync::OnceLock;
use tokio::runtime::Runtime;

/// Worker threads of the runtime: requests wait on the network, not on the cores.
const WORKERS: usize = 2;

pub(crate) fn runtime() -> &'static Runtime {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(WORKERS)
            .thread_name("corank-io")
            .enable_all()
            .build()
            .expect("the object stores' runtime starts")
    })
}

/// Runs `future` on the runtime and waits for it on this thread. Works from any thread,
/// a thread of another runtime too (the future runs on corank's; this thread only waits).
pub(crate) fn block_on<F>(future: F) -> F::Output
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let task = runtime().spawn(future);
    match futures::executor::block_on(task) {
        Ok(output) => output,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => panic!("a request of the object stores' runtime was cancelled: {e}"),
    }
}
