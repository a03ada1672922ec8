//! The doorbell on incoming/ (and on archive/, for a file written to after its
//! move): notify's callback only rings, on a channel of one.
//! What is ready is decided by the daemon's loop, which lists the folder itself;
//! events can be lost (queue overflow, inotify limits, network mounts), and the
//! loop's rescan timer covers that.
//!
//! Only events that can mean a file appeared or changed ring: a create, a write, a
//! close after writing, a rename into the folder, an attribute change, and any sign
//! that events were lost. The daemon's own work (listing the folder, opening and
//! reading files, moving them out) causes open, access and moved-from events, which
//! must not ring, or an idle daemon would wake itself for ever.

use std::path::Path;

use crossbeam_channel::Sender;
use notify::event::{AccessKind, AccessMode, EventKind, ModifyKind, RenameMode};
use notify::{RecursiveMode, Watcher};

/// Watches `dir` (not its subfolders) and rings `doorbell` on every event that can
/// make a file ready, and on every error. The watch lives as long as the returned
/// watcher.
pub(crate) fn watch(
    dir: &Path,
    doorbell: Sender<()>,
) -> notify::Result<notify::RecommendedWatcher> {
    watch_for(dir, "incoming/", can_make_ready, doorbell)
}

/// Watches archive/ (not its subfolders) and rings `doorbell` when a file in it is
/// written to: a writer still writing under the final name after the move, which
/// the daemon moves back to incoming/. The daemon's own moves into archive/ do
/// not ring.
pub(crate) fn watch_archive(
    dir: &Path,
    doorbell: Sender<()>,
) -> notify::Result<notify::RecommendedWatcher> {
    watch_for(dir, "archive/", can_change_archived, doorbell)
}

fn watch_for(
    dir: &Path,
    shown: &'static str,
    rings: fn(&EventKind) -> bool,
    doorbell: Sender<()>,
) -> notify::Result<notify::RecommendedWatcher> {
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        let ring = match &event {
            Err(error) => {
                log::warn!("watch {shown}: {error}; relying on the rescan");
                true
            }
            Ok(event) => event.need_rescan() || rings(&event.kind),
        };
        if ring {
            // A full channel means a wake-up is already pending: nothing is lost.
            let _ = doorbell.try_send(());
        }
    })?;
    watcher.watch(dir, RecursiveMode::NonRecursive)?;
    Ok(watcher)
}

/// Whether an event of this kind can mean that a file in the folder appeared or
/// changed. Unknown kinds ring: a spurious listing costs little, a missed file more.
pub(crate) fn can_make_ready(kind: &EventKind) -> bool {
    match kind {
        EventKind::Create(_) => true,
        EventKind::Modify(ModifyKind::Name(RenameMode::From)) => false,
        EventKind::Modify(_) => true,
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        EventKind::Access(_) => false,
        EventKind::Remove(_) => false,
        EventKind::Any | EventKind::Other => true,
    }
}

/// Whether an event of this kind can mean that an archived file was written to.
/// Names coming and going (the daemon's own moves, retention) do not ring.
pub(crate) fn can_change_archived(kind: &EventKind) -> bool {
    match kind {
        EventKind::Modify(ModifyKind::Name(_)) => false,
        EventKind::Modify(_) => true,
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        EventKind::Access(_) | EventKind::Create(_) | EventKind::Remove(_) => false,
        EventKind::Any | EventKind::Other => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use notify::event::{CreateKind, DataChange, MetadataKind, RemoveKind};

    #[test]
    fn only_what_can_make_a_file_ready_rings() {
        let rings = [
            EventKind::Create(CreateKind::File),
            EventKind::Modify(ModifyKind::Data(DataChange::Any)),
            EventKind::Modify(ModifyKind::Metadata(MetadataKind::Any)),
            EventKind::Modify(ModifyKind::Name(RenameMode::To)),
            EventKind::Modify(ModifyKind::Name(RenameMode::Both)),
            EventKind::Access(AccessKind::Close(AccessMode::Write)),
            EventKind::Other,
        ];
        let quiet = [
            EventKind::Access(AccessKind::Open(AccessMode::Any)),
            EventKind::Access(AccessKind::Close(AccessMode::Read)),
            EventKind::Access(AccessKind::Read),
            EventKind::Modify(ModifyKind::Name(RenameMode::From)),
            EventKind::Remove(RemoveKind::File),
        ];
        for kind in rings {
            assert!(can_make_ready(&kind), "{kind:?}");
        }
        for kind in quiet {
            assert!(!can_make_ready(&kind), "{kind:?}");
        }
    }

    #[test]
    fn only_a_write_to_an_archived_file_rings() {
        let rings = [
            EventKind::Modify(ModifyKind::Data(DataChange::Any)),
            EventKind::Modify(ModifyKind::Metadata(MetadataKind::Any)),
            EventKind::Access(AccessKind::Close(AccessMode::Write)),
            EventKind::Other,
        ];
        let quiet = [
            EventKind::Create(CreateKind::File),
            EventKind::Modify(ModifyKind::Name(RenameMode::To)),
            EventKind::Modify(ModifyKind::Name(RenameMode::From)),
            EventKind::Access(AccessKind::Close(AccessMode::Read)),
            EventKind::Remove(RemoveKind::File),
        ];
        for kind in rings {
            assert!(can_change_archived(&kind), "{kind:?}");
        }
        for kind in quiet {
            assert!(!can_change_archived(&kind), "{kind:?}");
        }
    }
}
