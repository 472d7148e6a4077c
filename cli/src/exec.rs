//! An action per sample that must not stall the drain: a shell command run by a worker.

use std::os::fd::AsFd;
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::thread::JoinHandle;

/// Runs `sh -c CMD` once per submitted sample, one after the other, on a worker thread,
/// so the sampling loop never waits on a child. Each run gets the environment it was
/// submitted with; its stdout goes to our stderr (so a JSON stdout stays parseable).
/// When `capacity` runs are waiting, further ones are dropped and counted.
///
/// # Examples
/// ```ignore
/// use crate::exec::ExecQueue;
/// let mut q = ExecQueue::start("echo overflow $N".into(), 1024);
/// q.submit(vec![("N", "1".to_string())]);
/// assert_eq!(q.finish(), 1);
/// ```
#[derive(Debug)]
pub struct ExecQueue {
    tx: Option<SyncSender<Vec<(&'static str, String)>>>,
    handle: Option<JoinHandle<u64>>,
    dropped: u64,
}

impl ExecQueue {
    /// Starts the worker for `cmd` with room for `capacity` waiting runs.
    pub fn start(cmd: String, capacity: usize) -> ExecQueue {
        let (tx, rx) = mpsc::sync_channel::<Vec<(&'static str, String)>>(capacity);
        let handle = std::thread::spawn(move || {
            let mut runs = 0;
            for env in rx {
                let mut c = std::process::Command::new("sh");
                c.arg("-c").arg(&cmd).envs(env);
                if let Ok(err) = std::io::stderr().as_fd().try_clone_to_owned() {
                    c.stdout(err);
                }
                match c.status() {
                    Ok(_) => runs += 1,
                    Err(e) => eprintln!("perfring: --exec: could not run sh -c {cmd:?}: {e}"),
                }
            }
            runs
        });
        ExecQueue {
            tx: Some(tx),
            handle: Some(handle),
            dropped: 0,
        }
    }

    /// Queues one run with `env` added to its environment (dropped if the queue is full).
    pub fn submit(&mut self, env: Vec<(&'static str, String)>) {
        if let Some(tx) = &self.tx {
            match tx.try_send(env) {
                Ok(()) => {}
                Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                    self.dropped += 1
                }
            }
        }
    }

    /// Runs dropped because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Waits for every queued run to finish; returns how many ran.
    pub fn finish(&mut self) -> u64 {
        self.tx.take();
        self.handle
            .take()
            .map_or(0, |h| h.join().unwrap_or_default())
    }
}
