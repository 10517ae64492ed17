//! Pipeline schedules in the `compute_comms` CSV format of `torch.distributed.pipelining` (what
//! torchtitan's `pipeline_parallel_schedule_csv` reads): one row per rank, one action per cell,
//! run in order by that rank (`shared/reference/torch-schedules/README.md` has the table).
//!
//! [`CsvSchedule::parse`] reads the text and checks what can be checked without running it: every
//! cell is a known action, every stage lives on one row, every receive has its send and every
//! send its receive, a compute that consumes a tensor of another rank received it first, a wait
//! follows what it waits for. Each error names the cell (file, row, column, text). Whether the
//! schedule can complete (no cycle of waits) is the discrete-event model's question
//! ([`crate::model`]).
use crate::program::Cell;
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// A compute action's kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Compute {
    /// Forward.
    F,
    /// Backward for inputs only.
    I,
    /// Backward for weights.
    W,
    /// Full backward (I then W).
    B,
}

/// One cell's action.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CsvAction {
    Compute {
        stage: u32,
        kind: Compute,
        mb: u32,
    },
    /// A forward and a full backward of other micro-batches issued as one action (DualPipe).
    OverlapFB {
        f_stage: u32,
        f_mb: u32,
        b_stage: u32,
        b_mb: u32,
    },
    /// `grad`: SEND_B / RECV_B / WAIT_SEND_B; otherwise the F variants.
    Send {
        stage: u32,
        grad: bool,
        mb: u32,
    },
    Recv {
        stage: u32,
        grad: bool,
        mb: u32,
    },
    WaitSend {
        stage: u32,
        grad: bool,
        mb: u32,
    },
    Unshard {
        stage: u32,
    },
    Reshard {
        stage: u32,
    },
    ReduceGrad {
        stage: u32,
    },
    WaitReduceGrad {
        stage: u32,
    },
}

impl CsvAction {
    /// The stage the action belongs to (the forward's for OVERLAP_F_B).
    pub fn stage(&self) -> u32 {
        match *self {
            CsvAction::Compute { stage, .. }
            | CsvAction::Send { stage, .. }
            | CsvAction::Recv { stage, .. }
            | CsvAction::WaitSend { stage, .. }
            | CsvAction::Unshard { stage }
            | CsvAction::Reshard { stage }
            | CsvAction::ReduceGrad { stage }
            | CsvAction::WaitReduceGrad { stage } => stage,
            CsvAction::OverlapFB { f_stage, .. } => f_stage,
        }
    }

    /// Every stage the action touches.
    fn stages(&self) -> Vec<u32> {
        match *self {
            CsvAction::OverlapFB {
                f_stage, b_stage, ..
            } => vec![f_stage, b_stage],
            a => vec![a.stage()],
        }
    }
}

/// A cell: its text and action.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CsvCell {
    pub text: String,
    pub action: CsvAction,
}

/// A parsed and checked schedule.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CsvSchedule {
    /// The file as given (names the cells in messages).
    pub file: String,
    /// `rows[r]`: rank r's cells in order.
    pub rows: Vec<Vec<CsvCell>>,
}

/// Action names, longest first (a name that is a prefix of another comes after it).
const NAMES: [&str; 14] = [
    "WAIT_REDUCE_GRAD",
    "REDUCE_GRAD",
    "WAIT_SEND_F",
    "WAIT_SEND_B",
    "UNSHARD",
    "RESHARD",
    "SEND_F",
    "SEND_B",
    "RECV_F",
    "RECV_B",
    "F",
    "I",
    "W",
    "B",
];

/// Splits `<digits><rest>`.
fn leading_number(s: &str) -> Option<(u32, &str)> {
    let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    if end == 0 {
        return None;
    }
    Some((s[..end].parse().ok()?, &s[end..]))
}

/// Parses one plain action (`2F0`, `1UNSHARD`, `3SEND_F1`).
fn parse_plain(text: &str) -> Option<CsvAction> {
    let (stage, rest) = leading_number(text)?;
    let name = NAMES.iter().find(|n| rest.starts_with(**n))?;
    let tail = &rest[name.len()..];
    let stage_only = matches!(
        *name,
        "UNSHARD" | "RESHARD" | "REDUCE_GRAD" | "WAIT_REDUCE_GRAD"
    );
    if stage_only {
        if !tail.is_empty() {
            return None;
        }
        return Some(match *name {
            "UNSHARD" => CsvAction::Unshard { stage },
            "RESHARD" => CsvAction::Reshard { stage },
            "REDUCE_GRAD" => CsvAction::ReduceGrad { stage },
            _ => CsvAction::WaitReduceGrad { stage },
        });
    }
    if tail.is_empty() || !tail.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mb: u32 = tail.parse().ok()?;
    let grad = name.ends_with('B');
    Some(match *name {
        "F" => CsvAction::Compute {
            stage,
            kind: Compute::F,
            mb,
        },
        "I" => CsvAction::Compute {
            stage,
            kind: Compute::I,
            mb,
        },
        "W" => CsvAction::Compute {
            stage,
            kind: Compute::W,
            mb,
        },
        "B" => CsvAction::Compute {
            stage,
            kind: Compute::B,
            mb,
        },
        n if n.starts_with("SEND") => CsvAction::Send { stage, grad, mb },
        n if n.starts_with("RECV") => CsvAction::Recv { stage, grad, mb },
        _ => CsvAction::WaitSend { stage, grad, mb },
    })
}

/// Parses a cell's text.
fn parse_action(text: &str) -> Option<CsvAction> {
    if let Some(inner) = text
        .strip_prefix('(')
        .and_then(|t| t.strip_suffix(")OVERLAP_F_B"))
    {
        let (a, b) = inner.split_once(';')?;
        return match (parse_plain(a.trim())?, parse_plain(b.trim())?) {
            (
                CsvAction::Compute {
                    stage: f_stage,
                    kind: Compute::F,
                    mb: f_mb,
                },
                CsvAction::Compute {
                    stage: b_stage,
                    kind: Compute::B,
                    mb: b_mb,
                },
            ) => Some(CsvAction::OverlapFB {
                f_stage,
                f_mb,
                b_stage,
                b_mb,
            }),
            _ => None,
        };
    }
    parse_plain(text)
}

/// Where a cell is: (row index, column index), 0-based.
type Pos = (usize, usize);

impl CsvSchedule {
    /// Reads and checks `path`.
    pub fn read(path: &std::path::Path) -> Result<CsvSchedule, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("--schedule-csv {}: {e}", path.display()))?;
        CsvSchedule::parse(&path.display().to_string(), &text)
    }

    /// Parses and checks `text` (the contents of `file`).
    pub fn parse(file: &str, text: &str) -> Result<CsvSchedule, String> {
        let mut rows = Vec::new();
        let lines: Vec<&str> = text.lines().collect();
        let last = lines.iter().rposition(|l| !l.trim().is_empty());
        for (r, line) in lines.iter().enumerate() {
            if last.is_none_or(|l| r > l) {
                break;
            }
            let mut cells = Vec::new();
            for (c, raw) in line.split(',').enumerate() {
                let t = raw.trim();
                let at = || format!("{file}: row {}, column {}", r + 1, c + 1);
                if t.is_empty() {
                    return Err(format!("{}: empty cell", at()));
                }
                let action = parse_action(t).ok_or_else(|| {
                    format!(
                        "{} ({t:?}): unknown action (want e.g. 2F0, 1I3, 0W1, 3B2, 1SEND_F0, 2RECV_B1, \
                         0WAIT_SEND_F1, 1UNSHARD, 1RESHARD, 0REDUCE_GRAD, 0WAIT_REDUCE_GRAD, \
                         (0F3;3B1)OVERLAP_F_B)",
                        at()
                    )
                })?;
                cells.push(CsvCell {
                    text: t.to_string(),
                    action,
                });
            }
            rows.push(cells);
        }
        if rows.is_empty() {
            return Err(format!("{file}: no rows"));
        }
        let s = CsvSchedule {
            file: file.to_string(),
            rows,
        };
        s.check()?;
        Ok(s)
    }

    /// The cell at `pos` for messages.
    pub fn cell(&self, (r, c): Pos) -> Cell {
        Cell {
            file: Arc::from(self.file.as_str()),
            row: r as u32 + 1,
            col: c as u32 + 1,
            text: self.rows[r][c].text.clone(),
        }
    }

    fn cells(&self) -> impl Iterator<Item = (Pos, &CsvAction)> {
        self.rows.iter().enumerate().flat_map(|(r, row)| {
            row.iter()
                .enumerate()
                .map(move |(c, cell)| ((r, c), &cell.action))
        })
    }

    /// Stage -> rank: the row that holds most of the stage's actions (the first such row on a
    /// tie); a cell of the stage in another row is an error of [`CsvSchedule::parse`].
    pub fn stage_ranks(&self) -> HashMap<u32, u32> {
        let mut count: HashMap<(u32, u32), usize> = HashMap::new();
        for ((r, _), a) in self.cells() {
            for s in a.stages() {
                *count.entry((s, r as u32)).or_default() += 1;
            }
        }
        let mut m: HashMap<u32, (u32, usize)> = HashMap::new();
        for (&(s, r), &n) in &count {
            let e = m.entry(s).or_insert((r, n));
            if n > e.1 || (n == e.1 && r < e.0) {
                *e = (r, n);
            }
        }
        m.into_iter().map(|(s, (r, _))| (s, r)).collect()
    }

    /// Number of stages (the highest index + 1).
    pub fn stages(&self) -> u32 {
        self.stage_ranks().keys().max().map_or(0, |s| s + 1)
    }

    /// Number of micro-batches (the highest index + 1).
    pub fn microbatches(&self) -> u32 {
        self.cells()
            .filter_map(|(_, a)| match *a {
                CsvAction::Compute { mb, .. } => Some(mb),
                CsvAction::OverlapFB { f_mb, b_mb, .. } => Some(f_mb.max(b_mb)),
                _ => None,
            })
            .max()
            .map_or(0, |m| m + 1)
    }

    /// Stages per rank (the most any row holds).
    pub fn stages_per_rank(&self) -> u32 {
        let ranks = self.stage_ranks();
        (0..self.rows.len() as u32)
            .map(|r| ranks.values().filter(|&&x| x == r).count() as u32)
            .max()
            .unwrap_or(1)
    }

    /// The static checks of the module docs.
    fn check(&self) -> Result<(), String> {
        let ranks = self.stage_ranks();
        let err = |pos: Pos, what: String| Err(format!("{}: {what}", self.cell(pos)));
        for (pos, a) in self.cells() {
            for s in a.stages() {
                if ranks[&s] != pos.0 as u32 {
                    return err(
                        pos,
                        format!(
                            "stage {s} belongs to row {} (which holds most of its actions)",
                            ranks[&s] + 1
                        ),
                    );
                }
            }
        }
        let n = self.stages();
        for s in 0..n {
            if !ranks.contains_key(&s) {
                return Err(format!(
                    "{}: stage {s} has no action (stages must be 0..{})",
                    self.file,
                    n - 1
                ));
            }
        }
        let remote = |a: u32, b: u32| ranks.get(&a) != ranks.get(&b);
        // The other end of a transfer: (stage of the peer's action, its kind).
        let sends: HashMap<(u32, bool, u32), Pos> = self
            .cells()
            .filter_map(|(p, a)| match *a {
                CsvAction::Send { stage, grad, mb } => Some(((stage, grad, mb), p)),
                _ => None,
            })
            .collect();
        let recvs: HashMap<(u32, bool, u32), Pos> = self
            .cells()
            .filter_map(|(p, a)| match *a {
                CsvAction::Recv { stage, grad, mb } => Some(((stage, grad, mb), p)),
                _ => None,
            })
            .collect();
        for (pos, a) in self.cells() {
            match *a {
                CsvAction::Send { stage, grad, mb } => {
                    let to = if grad {
                        stage.checked_sub(1)
                    } else {
                        Some(stage + 1)
                    };
                    let Some(to) = to.filter(|&t| t < n) else {
                        return err(
                            pos,
                            format!(
                                "stage {stage} has no {} to send to",
                                if grad { "previous stage" } else { "next stage" }
                            ),
                        );
                    };
                    if !remote(stage, to) {
                        return err(pos, format!("stages {stage} and {to} are on the same rank: they pass the tensor locally, without a send"));
                    }
                    if !recvs.contains_key(&(to, grad, mb)) {
                        let kind = if grad { "B" } else { "F" };
                        return err(
                            pos,
                            format!(
                                "a send with no matching receive ({to}RECV_{kind}{mb} is missing)"
                            ),
                        );
                    }
                }
                CsvAction::Recv { stage, grad, mb } => {
                    let from = if grad {
                        Some(stage + 1)
                    } else {
                        stage.checked_sub(1)
                    };
                    let Some(from) = from.filter(|&f| f < n) else {
                        return err(
                            pos,
                            format!(
                                "stage {stage} has no {} to receive from",
                                if grad { "next stage" } else { "previous stage" }
                            ),
                        );
                    };
                    if !remote(stage, from) {
                        return err(pos, format!("stages {from} and {stage} are on the same rank: they pass the tensor locally, without a receive"));
                    }
                    if !sends.contains_key(&(from, grad, mb)) {
                        let kind = if grad { "B" } else { "F" };
                        return err(pos, format!("a receive with no matching send ({from}SEND_{kind}{mb} is missing)"));
                    }
                }
                _ => {}
            }
        }
        for (r, row) in self.rows.iter().enumerate() {
            self.check_row(r, row, n, &ranks)?;
        }
        Ok(())
    }

    /// In one row: receives come before the compute that consumes them (once each), waits after
    /// what they wait for.
    fn check_row(
        &self,
        r: usize,
        row: &[CsvCell],
        n: u32,
        ranks: &HashMap<u32, u32>,
    ) -> Result<(), String> {
        let err = |c: usize, what: String| Err(format!("{}: {what}", self.cell((r, c))));
        let remote = |a: u32, b: u32| ranks.get(&a) != ranks.get(&b);
        let mut received: HashSet<(u32, bool, u32)> = HashSet::new();
        let mut sent: HashSet<(u32, bool, u32)> = HashSet::new();
        let mut reducing: HashSet<u32> = HashSet::new();
        // What a compute needs from another rank: (stage, grad, mb).
        let needs = |stage: u32, kind: Compute, mb: u32| -> Option<(u32, bool, u32)> {
            match kind {
                Compute::F if stage > 0 && remote(stage - 1, stage) => Some((stage, false, mb)),
                Compute::I | Compute::B if stage + 1 < n && remote(stage + 1, stage) => {
                    Some((stage, true, mb))
                }
                _ => None,
            }
        };
        for (c, cell) in row.iter().enumerate() {
            let mut consume = |stage: u32, kind: Compute, mb: u32| -> Result<(), String> {
                if let Some(k) = needs(stage, kind, mb) {
                    if !received.remove(&k) {
                        let what = if k.1 { "RECV_B" } else { "RECV_F" };
                        return err(c, format!("computes before receiving its input (no {stage}{what}{mb} before it in this row)"));
                    }
                }
                Ok(())
            };
            match cell.action {
                CsvAction::Recv { stage, grad, mb } => {
                    if !received.insert((stage, grad, mb)) {
                        return err(c, "receives the same tensor twice before using it".into());
                    }
                }
                CsvAction::Send { stage, grad, mb } => {
                    sent.insert((stage, grad, mb));
                }
                CsvAction::WaitSend { stage, grad, mb } => {
                    if !sent.contains(&(stage, grad, mb)) {
                        return err(
                            c,
                            "waits for a send that this row has not posted before it".into(),
                        );
                    }
                }
                CsvAction::ReduceGrad { stage } => {
                    reducing.insert(stage);
                }
                CsvAction::WaitReduceGrad { stage } => {
                    if !reducing.contains(&stage) {
                        return err(c, format!("waits for a gradient reduction that this row has not started before it ({stage}REDUCE_GRAD)"));
                    }
                }
                CsvAction::Compute { stage, kind, mb } => consume(stage, kind, mb)?,
                CsvAction::OverlapFB {
                    f_stage,
                    f_mb,
                    b_stage,
                    b_mb,
                } => {
                    consume(f_stage, Compute::F, f_mb)?;
                    consume(b_stage, Compute::B, b_mb)?;
                }
                CsvAction::Unshard { .. } | CsvAction::Reshard { .. } => {}
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "0F0,0SEND_F0,0RECV_B0,0B0\n1RECV_F0,1F0,1B0,1SEND_B0\n";

    #[test]
    fn parses_every_action() {
        let s = CsvSchedule::parse(
            "t.csv",
            "0UNSHARD,0F0,0SEND_F0,(0F1;0B0)OVERLAP_F_B,0RECV_B0,0I0,0W0,0WAIT_SEND_F0,0REDUCE_GRAD,0WAIT_REDUCE_GRAD,0RESHARD",
        );
        // Stage 0 has no next stage to send to: a clear error, naming the cell.
        let e = s.unwrap_err();
        assert!(e.contains("t.csv: row 1, column 3 (\"0SEND_F0\")"), "{e}");
        let s = CsvSchedule::parse("t.csv", GOOD).unwrap();
        assert_eq!(s.stages(), 2);
        assert_eq!(s.microbatches(), 1);
        assert_eq!(s.stages_per_rank(), 1);
        assert_eq!(
            s.rows[1][0].action,
            CsvAction::Recv {
                stage: 1,
                grad: false,
                mb: 0
            }
        );
        assert_eq!(
            parse_action("(2F3;1B4)OVERLAP_F_B"),
            Some(CsvAction::OverlapFB {
                f_stage: 2,
                f_mb: 3,
                b_stage: 1,
                b_mb: 4
            })
        );
        assert_eq!(parse_action("1UNSHARD2"), None);
        assert_eq!(parse_action("1F"), None);
        assert_eq!(parse_action("F1"), None);
        assert_eq!(parse_action("1FORWARD1"), None);
    }

    fn error(text: &str) -> String {
        CsvSchedule::parse("bad.csv", text).unwrap_err()
    }

    #[test]
    fn errors_name_the_cell() {
        let e = error("0F0,0SEND_F0,0RECV_B0,0B0\n1RECV_F0,1F0,1X0,1SEND_B0\n");
        assert!(
            e.starts_with("bad.csv: row 2, column 3 (\"1X0\"): unknown action"),
            "{e}"
        );
        let e = error("0F0,0SEND_F0,0RECV_B0,0B0\n1RECV_F0,1F0,1B0,1SEND_B0,1RECV_F1\n");
        assert!(e.contains("row 2, column 5 (\"1RECV_F1\"): a receive with no matching send (0SEND_F1 is missing)"), "{e}");
        let e = error("0F0,0SEND_F0,0SEND_F1,0RECV_B0,0B0\n1RECV_F0,1F0,1B0,1SEND_B0\n");
        assert!(
            e.contains("row 1, column 3 (\"0SEND_F1\"): a send with no matching receive"),
            "{e}"
        );
        let e = error("0F0,0SEND_F0,0RECV_B0,0B0\n1F0,1RECV_F0,1B0,1SEND_B0\n");
        assert!(
            e.contains("row 2, column 1 (\"1F0\"): computes before receiving"),
            "{e}"
        );
        let e = error("0F0,0SEND_F0,0RECV_B0,0B0,1F1\n1RECV_F0,1F0,1B0,1SEND_B0\n");
        assert!(
            e.contains("row 1, column 5 (\"1F1\"): stage 1 belongs to row 2"),
            "{e}"
        );
        let e = error("0F0,0WAIT_SEND_F0,0SEND_F0,0RECV_B0,0B0\n1RECV_F0,1F0,1B0,1SEND_B0\n");
        assert!(
            e.contains("column 2 (\"0WAIT_SEND_F0\"): waits for a send"),
            "{e}"
        );
        let e = error("0F0,,0B0\n");
        assert!(e.contains("row 1, column 2: empty cell"), "{e}");
    }

    /// Every schedule PyTorch exports parses and passes the static checks.
    #[test]
    fn the_reference_schedules_parse() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("schedules/torch");
        let mut n = 0;
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "csv") {
                let s = CsvSchedule::read(&p).unwrap();
                assert_eq!(s.stages_per_rank(), 2, "{}", p.display());
                n += 1;
            }
        }
        assert_eq!(n, 56);
    }
}
