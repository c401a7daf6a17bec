//! The connections being served, for the cap: each with a flag saying whether it is in the
//! middle of an answer, and the handle that closes it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::task::AbortHandle;

/// Open connections by id; ids grow with time, so the first one waiting has waited longest.
#[derive(Default)]
pub(crate) struct Connections {
    next_id: std::sync::atomic::AtomicU64,
    open: Mutex<BTreeMap<u64, Entry>>,
}

struct Entry {
    busy: Arc<AtomicBool>,
    /// Set once its task runs.
    task: Option<AbortHandle>,
}

/// A connection's place among the open ones; it leaves when dropped.
pub(crate) struct Slot {
    id: u64,
    busy: Arc<AtomicBool>,
    connections: Arc<Connections>,
}

impl Connections {
    fn lock(&self) -> MutexGuard<'_, BTreeMap<u64, Entry>> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A place for one more connection under `cap`; at the cap, when `evict`, the connection
    /// that has waited longest for a request is closed to make it. None when there is no room.
    pub(crate) fn make_room(self: &Arc<Self>, cap: usize, evict: bool) -> Option<Slot> {
        let mut open = self.lock();
        if open.len() >= cap {
            if !evict {
                return None;
            }
            let waiting = open
                .iter()
                .find(|(_, e)| e.task.is_some() && !e.busy.load(Ordering::Acquire))
                .map(|(id, _)| *id)?;
            if let Some(task) = open.remove(&waiting).and_then(|e| e.task) {
                task.abort();
            }
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let busy = Arc::new(AtomicBool::new(false));
        open.insert(
            id,
            Entry {
                busy: busy.clone(),
                task: None,
            },
        );
        Some(Slot {
            id,
            busy,
            connections: self.clone(),
        })
    }

    /// Records the task serving the connection `id` (nothing when it has finished already).
    pub(crate) fn started(&self, id: u64, task: AbortHandle) {
        if let Some(e) = self.lock().get_mut(&id) {
            e.task = Some(task);
        }
    }

    /// How many connections are open.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }
}

impl Slot {
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// Marks the connection busy until the guard is dropped.
    pub(crate) fn busy(&self) -> Busy<'_> {
        self.busy.store(true, Ordering::Release);
        Busy(&self.busy)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.connections.lock().remove(&self.id);
    }
}

/// A connection in the middle of an answer.
pub(crate) struct Busy<'a>(&'a AtomicBool);

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}
