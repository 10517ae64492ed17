//! From the streams and transfers to bubbles: the idle window now, the bubble it opens, what is
//! learnt at its anchor, and the bubble closed.
use super::*;

impl Timeline {
    /// The GPU-level idle window now, if the GPU is idle as far as known.
    pub(super) fn window(&self, now: Ns) -> Option<Idle> {
        let stale = self.stale_ns();
        let mut w: Option<Idle> = None;
        for s in self.streams.values().filter(|s| s.launches > 0) {
            let Window::Idle {
                from,
                until,
                blocked,
                anchor,
                awaited,
            } = s.window(now, stale)
            else {
                return None;
            };
            // Where the host issued no op after the compute that drained, the op the stream
            // waits for (see [`AWAITED`]).
            let anchor = anchor.map(|a| (a, 0)).or_else(|| {
                awaited
                    .and_then(|id| self.ops.get(&id))
                    .map(|o| (o.pos, AWAITED))
            });
            w = Some(match w {
                None => Idle {
                    from,
                    until,
                    blocked,
                    anchor,
                },
                Some(mut x) => {
                    if from > x.from {
                        x.from = from;
                        x.anchor = anchor;
                    }
                    x.until = match (x.until, until) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    };
                    x.blocked |= blocked;
                    x
                }
            });
        }
        let mut w = w?;
        // Past transfers and what was already reported.
        loop {
            let before = w.from;
            if w.from < self.emitted_until {
                w.from = self.emitted_until;
                w.anchor = None;
            }
            for &(a, b, op) in &self.xfers {
                if a <= w.from && w.from < b {
                    // The idle time after a transfer is learnt at the op that transferred.
                    w.from = b;
                    w.anchor = op;
                }
            }
            if w.from == before {
                break;
            }
        }
        for &b in self.sending.values() {
            if b <= w.from {
                return None;
            }
            w.until = Some(w.until.map_or(b, |u| u.min(b)));
        }
        for &(a, _, _) in &self.xfers {
            if a > w.from {
                w.until = Some(w.until.map_or(a, |u| u.min(a)));
            }
        }
        match w.until {
            Some(u) if u <= w.from => None,
            _ => Some(w),
        }
    }

    /// Opens, closes and reports bubbles as the window says.
    pub(super) fn refresh(&mut self, now: Ns) {
        for _ in 0..16 {
            let w = self.window(now);
            match (self.open.as_mut(), w) {
                // Knowledge came that the GPU drained earlier than thought: the bubble began then.
                (Some(o), Some(w)) if w.from < o.bubble.start && w.until.is_none() => {
                    if o.learn_from == o.bubble.start {
                        o.learn_from = w.from;
                    }
                    o.bubble.start = w.from;
                    o.anchor = o.anchor.or(w.anchor);
                    o.origin = o.origin.or(w.anchor);
                }
                (Some(o), Some(w)) if w.from == o.bubble.start => match w.until {
                    Some(u) => {
                        self.moved_nothing(u);
                        let o = self.open.take().expect("checked above");
                        self.close(o, u, now, false);
                    }
                    None => {
                        o.bubble.blocked = w.blocked;
                        // Where it belongs became known (the op issued after the compute),
                        // where it had none or only the op waited for.
                        let stand_in = o.anchor.is_none_or(|(_, p)| p == AWAITED);
                        if stand_in && w.anchor.is_some_and(|(_, p)| p != AWAITED) {
                            let seen = o.bubble.opened_seen;
                            self.open = Some(self.new_open(w, seen));
                        }
                        self.moved_nothing(Ns::MAX);
                        return;
                    }
                },
                // The window moved with no end seen (a lost record): the bubble is dropped.
                (Some(_), _) => {
                    let o = self.open.take().expect("checked above");
                    self.emitted_until = self.emitted_until.max(o.bubble.start);
                }
                (None, Some(w)) => {
                    let o = self.new_open(w, now);
                    match w.until {
                        Some(u) => self.close(o, u, now, false),
                        None => {
                            self.open = Some(o);
                            return;
                        }
                    }
                }
                (None, None) => return,
            }
        }
    }

    /// The open bubble goes on past the ends (before `until`) of ops that moved nothing: what
    /// came before each end is learnt at the bubble's anchor, and from the end on the bubble is
    /// learnt and predicted at the op's end, as the idle time after a transfer is. Without this
    /// the bubble's length at its anchor would depend on whether the op transferred (an op whose
    /// partners' begins say it moved nothing one iteration, and whose learnt transfer splits the
    /// bubble the next). Ends outside the open bubble are dropped.
    pub(super) fn moved_nothing(&mut self, until: Ns) {
        if self.nothing_moved.is_empty() {
            return;
        }
        let mut ends = std::mem::take(&mut self.nothing_moved);
        ends.sort_unstable();
        for (t, at) in ends {
            let Some(o) = self.open.as_mut() else {
                return;
            };
            if t <= o.learn_from || t >= until {
                continue;
            }
            if let Some((a, part)) = o.anchor.filter(|_| t - o.learn_from >= MIN_LEARNT_NS) {
                self.pattern.record(a, part, t - o.learn_from);
            }
            let p = self.pattern.predict(at.0, at.1);
            o.anchor = Some(at);
            o.learn_from = t;
            o.bubble.predicted_end = p.map(|p| t + p.expected_ns);
            o.bubble.shortest_end = p.map(|p| t + p.shortest_ns);
            o.bubble.spread_ns = p.map_or(0, |p| p.spread_ns);
            o.bubble.confidence = p.map_or(0.0, |p| p.confidence);
        }
    }

    pub(super) fn new_open(&self, w: Idle, now: Ns) -> Open {
        let opened_at = w.anchor;
        let mut w = w;
        if w.anchor.is_some() && w.anchor == self.last_opened_at {
            w.anchor = w.anchor.map(|(a, _)| (a, REPEAT));
        }
        let p = w.anchor.and_then(|(a, part)| self.pattern.predict(a, part));
        let predicted_end = p.map(|p| w.from + p.expected_ns);
        // The whole bubble where it was learnt whole; else it ends where its first part does.
        let forecast = w
            .anchor
            .and_then(|(a, part)| self.pattern.predict(a, whole(part)))
            .map(|p| w.from + p.expected_ns)
            .or(predicted_end);
        Open {
            bubble: OpenBubble {
                start: w.from,
                opened_seen: now,
                predicted_end,
                shortest_end: p.map(|p| w.from + p.shortest_ns),
                spread_ns: p.map_or(0, |p| p.spread_ns),
                confidence: p.map_or(0.0, |p| p.confidence),
                blocked: w.blocked,
                busy_from: None,
            },
            anchor: w.anchor,
            learn_from: w.from,
            origin: w.anchor,
            forecast,
            opened_at,
        }
    }

    pub(super) fn close(&mut self, o: Open, end: Ns, now: Ns, cut_by_exit: bool) {
        let b = o.bubble;
        let end = end.max(b.start);
        let from = o.learn_from.clamp(b.start, end);
        if let Some((a, part)) = o.anchor.filter(|_| end - from >= MIN_LEARNT_NS) {
            self.pattern.record(a, part, end - from);
        }
        if let Some((a, part)) = o.origin.filter(|_| end - b.start >= MIN_LEARNT_NS) {
            self.pattern.record(a, whole(part), end - b.start);
        }
        // A bubble of a millisecond or more: one that opens at the same op and part next is
        // another ([`REPEAT`]). A shorter one first (a host's late wake-up on a busy machine)
        // leaves the next to be the position's.
        self.last_opened_at = o.opened_at.filter(|_| end - b.start >= REPEAT_AFTER_NS);
        self.emitted_until = self.emitted_until.max(end);
        // Transfers before what was reported no longer matter.
        let done = self.emitted_until;
        self.xfers.retain(|x| x.1 > done);
        self.closed.push(Bubble {
            start: b.start,
            end,
            opened_seen: b.opened_seen,
            closed_seen: now.max(b.opened_seen),
            predicted_end: o.forecast,
            confidence: b.confidence,
            cut_by_exit,
        });
    }
}
