//! PageRank on a generated graph, as a freeride side task.
//!
//! One step = one power iteration. Its GPU work is real: the iteration in its dense form for
//! `--vectors` rank vectors at once (personalized PageRank for that many seed sets, default 1):
//! the transition matrix (nodes x nodes, fp32, on the device: 4 x nodes^2 bytes, 400 MB at the
//! default 10 000 nodes) times a nodes x vectors block, one cuBLAS GEMM on the task's stream
//! (nodes^2 x vectors multiply-adds: 100 µs a vector on the test bed's stand-in BLAS). The host
//! iterates the global ranks on the sparse graph for the result it reports and checks (the test
//! bed's GPU computes nothing).
//!
//! `cargo run --release -p freeride-sidetask-sdk --example pagerank -- --device 0 --standalone \
//!   --nodes 10000 --degree 8 --iterations 50 [--vectors 1]`
use freeride_sidetask::blas::Operands;
use freeride_sidetask::cli::{opt, Args, TaskOption};
use freeride_sidetask::{Ctx, Runtime, SideTask, StepOutcome, TaskResult};

struct Graph {
    n: usize,
    /// CSR of incoming edges: in_edges[in_start[v]..in_start[v+1]] are the sources of v.
    in_start: Vec<usize>,
    in_edges: Vec<u32>,
    out_degree: Vec<u32>,
}

/// Preferential-attachment-like generator (deterministic): each node links to `degree` earlier
/// nodes, chosen half uniformly and half from the endpoints of earlier edges (popular nodes).
fn generate(n: usize, degree: usize, seed: u64) -> Graph {
    let mut x = seed | 1;
    let mut rnd = move |m: usize| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % m as u64) as usize
    };
    let mut edges: Vec<(u32, u32)> = Vec::with_capacity(n * degree);
    for v in 1..n {
        for k in 0..degree.min(v) {
            let t = if k % 2 == 1 && !edges.is_empty() {
                edges[rnd(edges.len())].1 as usize
            } else {
                rnd(v)
            };
            edges.push((v as u32, t as u32));
        }
    }
    let mut out_degree = vec![0u32; n];
    let mut in_count = vec![0usize; n + 1];
    for &(s, t) in &edges {
        out_degree[s as usize] += 1;
        in_count[t as usize + 1] += 1;
    }
    for i in 0..n {
        in_count[i + 1] += in_count[i];
    }
    let mut fill = in_count.clone();
    let mut in_edges = vec![0u32; edges.len()];
    for &(s, t) in &edges {
        in_edges[fill[t as usize]] = s;
        fill[t as usize] += 1;
    }
    Graph {
        n,
        in_start: in_count,
        in_edges,
        out_degree,
    }
}

struct PageRank {
    graph: Graph,
    rank: Vec<f64>,
    damping: f64,
    tol: f64,
    max_iter: u64,
    iter: u64,
    delta: f64,
    /// Rank vectors the GPU iterates at once.
    vectors: u32,
    gpu: Option<Operands>,
}

impl PageRank {
    fn iterate(&mut self) -> f64 {
        let g = &self.graph;
        let n = g.n as f64;
        let dangling: f64 = (0..g.n)
            .filter(|&v| g.out_degree[v] == 0)
            .map(|v| self.rank[v])
            .sum();
        let base = (1.0 - self.damping) / n + self.damping * dangling / n;
        let mut next = vec![base; g.n];
        for (v, nv) in next.iter_mut().enumerate() {
            let mut s = 0.0;
            for &u in &g.in_edges[g.in_start[v]..g.in_start[v + 1]] {
                s += self.rank[u as usize] / g.out_degree[u as usize] as f64;
            }
            *nv += self.damping * s;
        }
        let delta = next
            .iter()
            .zip(&self.rank)
            .map(|(a, b)| (a - b).abs())
            .sum();
        self.rank = next;
        delta
    }

    fn top(&self, k: usize) -> Vec<(usize, f64)> {
        let mut idx: Vec<usize> = (0..self.graph.n).collect();
        idx.sort_by(|&a, &b| self.rank[b].total_cmp(&self.rank[a]));
        idx.into_iter().take(k).map(|v| (v, self.rank[v])).collect()
    }
}

impl SideTask for PageRank {
    fn init(&mut self, ctx: &mut Ctx) -> TaskResult<()> {
        // The dense transition matrix, the rank vector and the next one: within the budget.
        let (n, v) = (self.graph.n as u64, self.vectors as u64);
        self.gpu = Some(Operands::alloc(ctx, n * n, n * v, n * v)?);
        Ok(())
    }

    fn step(&mut self, ctx: &mut Ctx) -> TaskResult<StepOutcome> {
        let n = u32::try_from(self.graph.n)?;
        // next = M . ranks (the damping and the teleport term are folded into M).
        self.gpu
            .as_ref()
            .ok_or("init did not run")?
            .gemm(ctx, n, self.vectors, n)?;
        self.delta = self.iterate();
        self.iter += 1;
        if self.iter.checked_rem(10) == Some(0) {
            println!("pagerank: iteration {} delta {:.3e}", self.iter, self.delta);
        }
        Ok(StepOutcome::Continue)
    }

    fn is_finished(&self) -> bool {
        self.iter >= self.max_iter || (self.iter > 0 && self.delta < self.tol)
    }

    fn on_finished(&mut self, ctx: &mut Ctx) {
        if let Some(g) = self.gpu.take() {
            let _ = g.free(ctx);
        }
    }
}

/// This task's own options (`--help` lists them with the common ones).
const OPTIONS: [TaskOption; 7] = [
    opt("nodes", "graph nodes (default 10000, at most 46000)"),
    opt("degree", "edges per node (default 8)"),
    opt("seed", "graph seed (default 42)"),
    opt("damping", "damping factor (default 0.85)"),
    opt(
        "tol",
        "stop when an iteration changes the ranks by less (default 1e-9)",
    ),
    opt("iterations", "power iterations at most (default 50)"),
    opt(
        "vectors",
        "rank vectors multiplied per iteration on the GPU (the dense GEMM's width, default 1)",
    ),
];

fn main() {
    let args = Args::from_env(
        "pagerank",
        "PageRank on a generated graph, one power iteration per step",
        &OPTIONS,
    );
    let n = args.get_u64("nodes", 10_000).min(46_000) as usize;
    let degree = args.get_u64("degree", 8) as usize;
    let graph = generate(n.max(2), degree.max(1), args.get_u64("seed", 42));
    println!(
        "pagerank: {} nodes, {} edges",
        graph.n,
        graph.in_edges.len()
    );
    let mut task = PageRank {
        rank: vec![1.0 / graph.n as f64; graph.n],
        graph,
        damping: args.get_f64("damping", 0.85),
        tol: args.get_f64("tol", 1e-9),
        max_iter: args.get_u64("iterations", 50),
        iter: 0,
        delta: f64::INFINITY,
        vectors: args.get_u64("vectors", 1).clamp(1, 65_536) as u32,
        gpu: None,
    };
    let mut rt = Runtime::new(args.config.clone()).unwrap_or_else(|e| {
        eprintln!("pagerank: {e}");
        std::process::exit(1)
    });
    match rt.run(&mut task) {
        Ok(summary) => {
            let top = task.top(5);
            for (v, r) in &top {
                println!("pagerank: node {v} rank {r:.6}");
            }
            let sum: f64 = task.rank.iter().sum();
            println!(
                "{}",
                summary.to_json_with(serde_json::json!({
                    "iterations": task.iter,
                    "delta": task.delta,
                    "rank_sum": sum,
                    "top": top.iter().map(|(v, r)| serde_json::json!([v, r])).collect::<Vec<_>>(),
                }))
            );
        }
        Err(e) => {
            eprintln!("pagerank: {e}");
            std::process::exit(1);
        }
    }
}
