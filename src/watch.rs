//! The doorbell on incoming/: notify's callback only rings, on a channel of one.
//! What is ready is decided by the daemon's loop, which lists the folder itself;
//! events can be lost (queue overflow, inotify limits, network mounts), and the
//! loop's rescan timer covers that.

use std::path::Path;

use crossbeam_channel::Sender;
use notify::{RecursiveMode, Watcher};

/// Watches `dir` (not its subfolders) and rings `doorbell` on every event or error.
/// The watch lives as long as the returned watcher.
pub fn watch(dir: &Path, doorbell: Sender<()>) -> notify::Result<notify::RecommendedWatcher> {
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        if let Err(error) = &event {
            log::warn!("watch incoming/: {error}; relying on the rescan");
        }
        // A full channel means a wake-up is already pending: nothing is lost.
        let _ = doorbell.try_send(());
    })?;
    watcher.watch(dir, RecursiveMode::NonRecursive)?;
    Ok(watcher)
}
