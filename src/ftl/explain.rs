//! `spoolite ftl explain`: where a window's minutes come from. No I/O: `lines`
//! takes one crew member's flights, duties or flight duty periods (with their
//! ids) and gives each the minutes it puts into the window, listing each instant
//! once, under the item of the highest weight covering it, then the one that
//! started first, then the smaller id, so that the lines add up to the figure
//! `spoolite ftl` prints. `free_span` gives the free span behind a rest window.

use super::span::{self, Free, Weight};
use super::time::{Micros, TimeBase};
use super::{Rest, Span};

/// One item that may put minutes into a window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    pub id: String,
    pub start: Micros,
    /// None while open.
    pub end: Option<Micros>,
    pub weight: Weight,
}

/// An item with the minutes (in microseconds, after its weight) it puts into
/// the window; items that put none are left out. In start order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attributed {
    pub item: Item,
    pub micros: Micros,
}

/// Each item's share of the window from `from` to `at` (open items run to `at`).
pub fn lines(items: Vec<Item>, from: Micros, at: Micros) -> Vec<Attributed> {
    let end = |item: &Item| item.end.unwrap_or(at).min(at);
    let mut edges: Vec<Micros> = vec![from, at];
    for item in &items {
        edges.push(item.start.clamp(from, at));
        edges.push(end(item).clamp(from, at));
    }
    edges.sort_unstable();
    edges.dedup();
    let mut micros = vec![0 as Micros; items.len()];
    for pair in edges.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        let top = (0..items.len())
            .filter(|&i| items[i].start <= a && end(&items[i]) >= b)
            .min_by(|&i, &j| {
                let (x, y) = (&items[i], &items[j]);
                (y.weight.cmp(&x.weight))
                    .then(x.start.cmp(&y.start))
                    .then(x.id.cmp(&y.id))
            });
        if let Some(i) = top {
            micros[i] += span::weighted(b - a, items[i].weight);
        }
    }
    let mut out: Vec<Attributed> = items
        .into_iter()
        .zip(micros)
        .filter(|(_, micros)| *micros > 0)
        .map(|(item, micros)| Attributed { item, micros })
        .collect();
    out.sort_by(|a, b| (a.item.start, &a.item.id).cmp(&(b.item.start, &b.item.id)));
    out
}

/// The free span that ends a rest window's last qualifying rest at `at` (FAA: the
/// one that gives E; EASA: the one that gives E′, or the span running at `at`
/// when it is itself a recovery rest), and the window's use; None when there is
/// none. `busy` holds every duty's pieces.
pub fn free_span(
    rest: Span,
    busy: &[span::Weighted],
    at: Micros,
    base: &TimeBase,
) -> Option<(Free, Micros)> {
    let free = span::free_spans(busy, at);
    let (used, found) = match rest {
        Span::SinceRest(Rest::Free30h) => span::since_30h_free(&free, at),
        Span::SinceRest(Rest::ExtendedRecovery) => span::since_recovery_rest(&free, at, base),
        _ => return None,
    };
    found.map(|free| (free, used))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ftl::span::FULL;
    use crate::ftl::time::parse_instant;

    fn t(text: &str) -> Micros {
        parse_instant(text).expect(text)
    }

    fn item(id: &str, start: &str, end: Option<&str>, weight: Weight) -> Item {
        Item {
            id: id.to_owned(),
            start: t(start),
            end: end.map(t),
            weight,
        }
    }

    const H: Micros = 3_600_000_000;

    #[test]
    fn overlapping_items_share_the_window_and_add_up_to_its_figure() {
        // A home standby 00–12 under a duty 08–16 and a second duty 14–18 that
        // starts later (equal weight: the earlier keeps 14–16); window 02–17.
        let items = vec![
            item(
                "HS",
                "2026-12-01T00:00:00Z",
                Some("2026-12-01T12:00:00Z"),
                250,
            ),
            item(
                "D1",
                "2026-12-01T08:00:00Z",
                Some("2026-12-01T16:00:00Z"),
                FULL,
            ),
            item(
                "D2",
                "2026-12-01T14:00:00Z",
                Some("2026-12-01T18:00:00Z"),
                FULL,
            ),
            item(
                "OLD",
                "2026-11-30T20:00:00Z",
                Some("2026-12-01T01:00:00Z"),
                FULL,
            ),
        ];
        let (from, at) = (t("2026-12-01T02:00:00Z"), t("2026-12-01T17:00:00Z"));
        let got: Vec<(String, Micros)> = lines(items.clone(), from, at)
            .into_iter()
            .map(|a| (a.item.id, a.micros))
            .collect();
        assert_eq!(
            got,
            [
                ("HS".to_owned(), 6 * H / 4),
                ("D1".to_owned(), 8 * H),
                ("D2".to_owned(), H),
            ]
        );
        // The same total as the window's figure.
        let pieces = span::pieces(
            &items
                .iter()
                .map(|i| span::Weighted {
                    start: i.start,
                    end: i.end.unwrap_or(at).min(at),
                    weight: i.weight,
                })
                .collect::<Vec<_>>(),
        );
        assert_eq!(span::inside(&pieces, from, at), 6 * H / 4 + 9 * H);
    }

    #[test]
    fn an_open_item_runs_to_t_and_ties_go_to_the_smaller_id() {
        let items = vec![
            item("B", "2026-12-01T08:00:00Z", None, FULL),
            item("A", "2026-12-01T08:00:00Z", None, FULL),
        ];
        let got = lines(items, t("2026-12-01T00:00:00Z"), t("2026-12-01T10:00:00Z"));
        assert_eq!(got.len(), 1);
        assert_eq!((got[0].item.id.as_str(), got[0].micros), ("A", 2 * H));
    }
}
