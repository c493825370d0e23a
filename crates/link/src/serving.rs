//! A server on a thread of this process, possibly inside a namespace: the
//! far end an experiment measures against. The thread binds, says where
//! it listens (or why it could not), serves until its stop flag is
//! raised, and is stopped and joined on drop, so a server never outlives
//! the namespace it lives in as long as it is dropped first.

use osprobe_core::ExperimentError;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// What a serving thread runs; a spawner starts it where the server lives.
pub type ServeBody = Box<dyn FnOnce() -> io::Result<()> + Send>;

/// Why a server could not start (bind, listen ...): its own error, whatever
/// the server's type, kept as the source of the experiment's error.
pub type StartError = Box<dyn std::error::Error + Send + Sync>;

/// How long a server may take to bind before the start is given up.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// A running server thread; raises its stop flag and joins it on drop.
#[derive(Debug)]
pub struct ServingThread {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<io::Result<()>>>,
}

impl ServingThread {
    /// Start `body` on a thread made by `spawn` (a plain thread, or
    /// [`crate::NetnsPair::spawn_in`], [`crate::Link::spawn_in`]). `body`
    /// gets the stop flag and a sender on which it reports its address
    /// once bound, or the error; `what` names the server in errors.
    pub fn start<S, F>(
        spawn: S,
        what: &str,
        body: F,
    ) -> Result<(ServingThread, SocketAddr), ExperimentError>
    where
        S: FnOnce(ServeBody) -> io::Result<JoinHandle<io::Result<()>>>,
        F: FnOnce(Arc<AtomicBool>, Sender<Result<SocketAddr, StartError>>) -> io::Result<()>
            + Send
            + 'static,
    {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let (ready, addr) = std::sync::mpsc::channel();
        let thread = spawn(Box::new(move || body(flag, ready)))
            .map_err(|e| ExperimentError::io(format!("starting the {what} thread"), e))?;
        // From here on, dropping `serving` stops the thread, also when it
        // never reports.
        let serving = ServingThread {
            stop,
            thread: Some(thread),
        };
        let addr = addr
            .recv_timeout(START_TIMEOUT)
            .map_err(|_| ExperimentError::Failed(format!("the {what} did not start")))?
            .map_err(|e| ExperimentError::setup(format!("starting the {what}"), e))?;
        Ok((serving, addr))
    }

    /// A plain thread of this process named `name`, for [`Self::start`].
    pub fn plain_thread(
        name: &str,
    ) -> impl FnOnce(ServeBody) -> io::Result<JoinHandle<io::Result<()>>> + '_ {
        move |body| std::thread::Builder::new().name(name.into()).spawn(body)
    }
}

impl Drop for ServingThread {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};

    #[test]
    fn reports_its_address_and_stops_on_drop() {
        let finished = std::sync::Arc::new(AtomicBool::new(false));
        let finished_in_thread = finished.clone();
        let (serving, addr) = ServingThread::start(
            ServingThread::plain_thread("test-server"),
            "test server",
            move |stop, ready| {
                let listener = TcpListener::bind("127.0.0.1:0")?;
                listener.set_nonblocking(true)?;
                let _ = ready.send(listener.local_addr().map_err(StartError::from));
                while !stop.load(Ordering::SeqCst) {
                    let _ = listener.accept();
                    std::thread::sleep(Duration::from_millis(5));
                }
                drop(listener);
                finished_in_thread.store(true, Ordering::SeqCst);
                Ok(())
            },
        )
        .unwrap();
        assert!(TcpStream::connect(addr).is_ok());
        drop(serving);
        // The thread (and its listener) ended before drop returned. (Not
        // checked by connecting again: a test running beside this one may
        // have been given the freed port.)
        assert!(finished.load(Ordering::SeqCst));
    }

    #[test]
    fn a_server_that_cannot_bind_says_why() {
        let err = ServingThread::start(
            ServingThread::plain_thread("test-server"),
            "test server",
            |_, ready| {
                let _ = ready.send(Err("address in use".into()));
                Ok(())
            },
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("test server") && err.contains("address in use"),
            "{err}"
        );
    }
}
