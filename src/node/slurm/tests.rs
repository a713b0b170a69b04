//! Slurm's environment, played: parsers and the decision, from maps.

use super::*;
use std::collections::HashMap;

fn hosts(list: &str) -> Vec<String> {
    parse_hostlist(list).unwrap_or_else(|e| panic!("{list}: {e}"))
}

#[test]
fn host_lists_expand_as_slurm_writes_them() {
    assert_eq!(hosts("localhost"), ["localhost"]);
    assert_eq!(
        hosts("node[01-04,07]"),
        ["node01", "node02", "node03", "node04", "node07"]
    );
    assert_eq!(hosts("a1,b[2-3],c"), ["a1", "b2", "b3", "c"]);
    // Width is the lower bound's as written.
    assert_eq!(hosts("n[8-10]"), ["n8", "n9", "n10"]);
    assert_eq!(hosts("n[08-10]"), ["n08", "n09", "n10"]);
    assert_eq!(hosts("n[098-100]"), ["n098", "n099", "n100"]);
    assert_eq!(hosts("n[0]"), ["n0"]);
    // Groups anywhere, several in one name: a product, leftmost slowest.
    assert_eq!(
        hosts("rack[1-2]-n[01-02]"),
        ["rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02"]
    );
    assert_eq!(hosts("n[1-2]-ib,[7]"), ["n1-ib", "n2-ib", "7"]);
    assert_eq!(
        hosts("gpu[1,3-4],cpu[09-10]"),
        ["gpu1", "gpu3", "gpu4", "cpu09", "cpu10"]
    );
    assert_eq!(hosts("n[1-1000]").len(), 1000);
}

#[test]
fn malformed_host_lists_say_what_is_wrong() {
    for (list, want) in [
        ("", ListError::Empty),
        ("a,,b", ListError::Empty),
        ("a,", ListError::Empty),
        ("node[1-", ListError::Brackets),
        ("node]1[", ListError::Brackets),
        ("node[[1]]", ListError::Brackets),
        ("node[1]]", ListError::Brackets),
        ("node[]", ListError::Range(String::new())),
        ("node[3-1]", ListError::Range("3-1".into())),
        ("node[a-b]", ListError::Range("a-b".into())),
        ("node[1-2-3]", ListError::Range("1-2-3".into())),
        ("node[-1]", ListError::Range("-1".into())),
        ("node[1,]", ListError::Range(String::new())),
        ("node[+1]", ListError::Range("+1".into())),
        ("a b", ListError::Character(' ')),
        ("a\nb", ListError::Character('\n')),
        ("n[0-99999999999]", ListError::TooMany),
        ("n[0-1023]x[0-1023]y[0-1]", ListError::TooMany),
        ("n[0-18446744073709551615]", ListError::TooMany),
        (
            "n[0-99999999999999999999]",
            ListError::Range("0-99999999999999999999".into()),
        ),
    ] {
        assert_eq!(parse_hostlist(list), Err(want), "{list:?}");
    }
}

/// The most memory this process has held so far (`ru_maxrss`).
fn peak_rss_bytes() -> u64 {
    // SAFETY: getrusage writes the struct it is given, of its type.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; RUSAGE_SELF is always valid.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    u64::try_from(usage.ru_maxrss).unwrap_or(0) * 1024
}

/// A malformed `SLURM_STEP_NODELIST` asking for gigabytes: a range written
/// 100 000 digits wide (2^20 names of 100 kB each), many bracket groups
/// in one name (each a million numbers), many items of that wide range.
/// Each is measured before anything is expanded and refused by its typed
/// error, quickly and without holding more than a few megabytes.
#[test]
fn host_lists_asking_for_gigabytes_are_refused_before_expanding() {
    let wide = format!("n[{}-1048575]", "0".repeat(100_000));
    let groups = format!("n{}", "[0-1048575]".repeat(64));
    let items = vec![format!("n[{}-3]", "0".repeat(10_000)); 2_000].join(",");
    let started = std::time::Instant::now();
    assert_eq!(parse_hostlist(&wide), Err(ListError::TooLong));
    assert_eq!(parse_hostlist(&groups), Err(ListError::TooMany));
    assert_eq!(parse_hostlist(&items), Err(ListError::TooLong));
    assert!(
        started.elapsed() < std::time::Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    // The test process's peak: the inputs themselves are a few MB.
    assert!(
        peak_rss_bytes() < 256 << 20,
        "peak {} MB",
        peak_rss_bytes() >> 20
    );
    // Just inside both bounds still expands.
    assert_eq!(hosts("n[0-1048575]").len(), 1 << 20);
}

#[test]
fn tasks_per_node_expand_counts_and_repeats() {
    assert_eq!(parse_tasks_per_node("4"), Ok(vec![4]));
    assert_eq!(parse_tasks_per_node("2(x3),1"), Ok(vec![2, 2, 2, 1]));
    assert_eq!(parse_tasks_per_node("1,3(x1),2(x2)"), Ok(vec![1, 3, 2, 2]));
    for (list, want) in [
        ("", ListError::Empty),
        ("2,,1", ListError::Empty),
        ("2(x0)", ListError::Count("2(x0)".into())),
        ("2(3)", ListError::Count("2(3)".into())),
        ("2(x3", ListError::Count("2(x3".into())),
        ("(x3)", ListError::Count("(x3)".into())),
        ("x", ListError::Count("x".into())),
        ("-1", ListError::Count("-1".into())),
        ("2 ", ListError::Count("2 ".into())),
        ("4294967296", ListError::Count("4294967296".into())),
        ("1(x99999999)", ListError::TooMany),
    ] {
        assert_eq!(parse_tasks_per_node(list), Err(want), "{list:?}");
    }
}

#[test]
fn the_port_is_unprivileged_and_differs_between_steps_of_a_job() {
    assert_eq!(seed_port(0, 0), 20_000);
    assert_eq!(seed_port(1, 0), 20_016);
    assert_eq!(seed_port(1, 1), 20_017);
    assert_eq!(seed_port(512, 0), seed_port(0, 0), "jobs 512 apart share");
    for job in [0, 1, 7, 511, 4_000_000, u64::from(u32::MAX), u64::MAX] {
        let ports: std::collections::BTreeSet<u16> =
            (0..STEPS_PER_JOB).map(|s| seed_port(job, s)).collect();
        assert_eq!(ports.len(), STEPS_PER_JOB as usize, "job {job}");
        for step in [0, 15, 16, 1 << 31, u64::MAX] {
            let p = seed_port(job, step);
            assert!(
                (20_000..20_000 + PORT_SPAN).contains(&p),
                "{job}.{step}: {p}"
            );
        }
    }
    // Neighbouring jobs, each step: no two alike.
    let ports: std::collections::BTreeSet<u16> = (1000..1100)
        .flat_map(|j| (0..4).map(move |s| seed_port(j, s)))
        .collect();
    assert_eq!(ports.len(), 400);
}

/// The environment `srun -n <tasks>` gives task `rank` on `nodelist`.
fn srun(rank: u32, tasks: u32, nodelist: &str, per_node: &str) -> HashMap<String, String> {
    let nodes = parse_hostlist(nodelist).map_or(0, |h| h.len());
    [
        ("SLURM_JOB_ID", "4242".to_string()),
        ("SLURM_STEP_ID", "3".into()),
        ("SLURM_PROCID", rank.to_string()),
        ("SLURM_NTASKS", tasks.to_string()),
        ("SLURM_LOCALID", "0".into()),
        ("SLURM_STEP_NODELIST", nodelist.into()),
        ("SLURM_STEP_NUM_NODES", nodes.to_string()),
        ("SLURM_STEP_TASKS_PER_NODE", per_node.into()),
        ("SLURM_DISTRIBUTION", "block".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

fn decide_in(env: &HashMap<String, String>) -> std::result::Result<Option<Formation>, SlurmError> {
    decide(|n| env.get(n).cloned())
}

fn with(mut env: HashMap<String, String>, name: &str, value: &str) -> HashMap<String, String> {
    env.insert(name.into(), value.into());
    env
}

fn without(mut env: HashMap<String, String>, name: &str) -> HashMap<String, String> {
    env.remove(name);
    env
}

#[test]
fn a_step_on_one_host_forms_on_loopback_without_a_token() {
    let env = with(srun(2, 4, "localhost", "4"), "SLURMD_NODENAME", "localhost");
    let f = decide_in(&env).unwrap().expect("a Slurm step");
    assert_eq!((f.rank, f.world, f.job, f.step), (2, 4, 4242, 3));
    assert_eq!(f.seed_host, SeedHost::Loopback);
    assert_eq!(f.port, seed_port(4242, 3));
    assert_eq!(
        seed_address(&f).unwrap(),
        SocketAddr::from(([127, 0, 0, 1], f.port))
    );
    // Rank 0 on the step's (one) host: the same seed.
    let f0 = decide_in(&with(env, "SLURM_PROCID", "0")).unwrap().unwrap();
    assert_eq!(
        (f0.rank, &f0.seed_host, f0.port),
        (0, &SeedHost::Loopback, f.port)
    );
}

#[test]
fn a_step_over_several_hosts_needs_a_token_and_seeds_on_the_first() {
    let env = srun(5, 7, "node[01-03,07]", "2(x3),1");
    match decide_in(&env) {
        Err(e @ SlurmError::TokenRequired { hosts: 4, .. }) => {
            let text = Error::from(e).to_string();
            assert!(
                text.contains("CLUSTER_TOKEN") && text.contains("meshrun token"),
                "{text}"
            );
        }
        other => panic!("{other:?}"),
    }
    let env = with(env, "CLUSTER_TOKEN", "a secret of sixteen bytes or more");
    let f = decide_in(&env).unwrap().unwrap();
    assert_eq!(f.seed_host, SeedHost::Named("node01".into()));
    assert_eq!(f.hosts.len(), 4);
    // A name resolved: numeric here, so no DNS is needed.
    let numeric = Formation {
        seed_host: SeedHost::Named("10.1.2.3".into()),
        ..f.clone()
    };
    assert_eq!(
        seed_address(&numeric).unwrap(),
        SocketAddr::from(([10, 1, 2, 3], f.port))
    );
    // One resolving to loopback only would strand the other hosts.
    let looped = Formation {
        seed_host: SeedHost::Named("127.0.1.1".into()),
        ..f
    };
    let e = seed_address(&looped).unwrap_err().to_string();
    assert!(
        e.contains("SLURM_STEP_NODELIST") && e.contains("loopback"),
        "{e}"
    );
}

#[test]
fn two_steps_of_one_job_get_two_ports_and_the_port_can_be_set() {
    let step = |id: &str| {
        decide_in(&with(srun(0, 2, "n1", "2"), "SLURM_STEP_ID", id))
            .unwrap()
            .unwrap()
            .port
    };
    assert_ne!(step("0"), step("1"));
    let env = with(srun(0, 2, "n1", "2"), "MESHWORK_SLURM_PORT", "31000");
    assert_eq!(decide_in(&env).unwrap().unwrap().port, 31000);
    for bad in ["0", "65536", "x", "-1"] {
        let env = with(srun(0, 2, "n1", "2"), "MESHWORK_SLURM_PORT", bad);
        assert!(
            matches!(
                decide_in(&env),
                Err(SlurmError::Bad {
                    var: "MESHWORK_SLURM_PORT",
                    ..
                })
            ),
            "{bad}"
        );
    }
}

#[test]
fn only_an_srun_step_left_to_meshwork_is_taken() {
    let step = srun(1, 2, "n1", "2");
    assert!(decide_in(&step).unwrap().is_some());
    // Not a step (a batch script has no SLURM_STEP_ID), or not Slurm.
    for missing in [
        "SLURM_JOB_ID",
        "SLURM_STEP_ID",
        "SLURM_PROCID",
        "SLURM_NTASKS",
    ] {
        assert_eq!(
            decide_in(&without(step.clone(), missing)),
            Ok(None),
            "{missing}"
        );
    }
    assert_eq!(decide_in(&HashMap::new()), Ok(None));
    // The job said how to form: its own settings win.
    for (name, value) in [
        ("RANK", "1"),
        ("WORLD", "2"),
        ("WORLD_SIZE", "2"),
        ("OMPI_COMM_WORLD_RANK", "1"),
        ("PEERS", "127.0.0.1:1,127.0.0.1:2"),
        ("SEED", "127.0.0.1:29400"),
        ("MASTER_ADDR", "127.0.0.1"),
        ("DISCOVER", "1"),
    ] {
        assert_eq!(
            decide_in(&with(step.clone(), name, value)),
            Ok(None),
            "{name}"
        );
    }
    // Blank is unset, and DISCOVER=0 is no choice.
    assert!(decide_in(&with(step.clone(), "RANK", " "))
        .unwrap()
        .is_some());
    assert!(decide_in(&with(step.clone(), "DISCOVER", "0"))
        .unwrap()
        .is_some());
    // The step's other variables are optional checks.
    let bare = [
        "SLURM_STEP_NUM_NODES",
        "SLURM_STEP_TASKS_PER_NODE",
        "SLURM_DISTRIBUTION",
    ]
    .iter()
    .fold(step, |env, n| without(env, n));
    assert!(decide_in(&bare).unwrap().is_some());
}

#[test]
fn a_malformed_or_inconsistent_step_names_the_variable() {
    let step = || srun(1, 4, "n[1-2]", "2(x2)");
    let step = || with(step(), "CLUSTER_TOKEN", "a secret of sixteen bytes or more");
    for (env, var) in [
        (with(step(), "SLURM_JOB_ID", "12a"), "SLURM_JOB_ID"),
        (with(step(), "SLURM_STEP_ID", "-1"), "SLURM_STEP_ID"),
        (with(step(), "SLURM_PROCID", "x"), "SLURM_PROCID"),
        (with(step(), "SLURM_PROCID", "4"), "SLURM_PROCID"),
        (with(step(), "SLURM_NTASKS", "0"), "SLURM_NTASKS"),
        (
            without(step(), "SLURM_STEP_NODELIST"),
            "SLURM_STEP_NODELIST",
        ),
        (
            with(step(), "SLURM_STEP_NODELIST", "n[1-"),
            "SLURM_STEP_NODELIST",
        ),
        (
            with(step(), "SLURM_STEP_NUM_NODES", "3"),
            "SLURM_STEP_NUM_NODES",
        ),
        (
            with(step(), "SLURM_STEP_TASKS_PER_NODE", "2(x)"),
            "SLURM_STEP_TASKS_PER_NODE",
        ),
        (
            with(step(), "SLURM_STEP_TASKS_PER_NODE", "2,1"),
            "SLURM_STEP_TASKS_PER_NODE",
        ),
        (
            with(step(), "SLURM_STEP_TASKS_PER_NODE", "2(x3)"),
            "SLURM_STEP_TASKS_PER_NODE",
        ),
        (
            with(step(), "SLURM_DISTRIBUTION", "arbitrary"),
            "SLURM_DISTRIBUTION",
        ),
        (
            with(with(step(), "SLURM_PROCID", "0"), "SLURMD_NODENAME", "n2"),
            "SLURM_STEP_NODELIST",
        ),
    ] {
        match decide_in(&env) {
            Err(SlurmError::Bad { var: v, .. }) if v == var => {}
            other => panic!("{var}: {other:?}"),
        }
    }
    // The message names the variable and its value.
    let e = decide_in(&with(step(), "SLURM_STEP_NODELIST", "n[3-1]")).unwrap_err();
    assert!(
        e.to_string().starts_with("SLURM_STEP_NODELIST=\"n[3-1]\""),
        "{e}"
    );
    // Rank 0 on the first host, and other placements than block, pass.
    let ok = with(with(step(), "SLURM_PROCID", "0"), "SLURMD_NODENAME", "n1");
    assert!(decide_in(&ok).unwrap().is_some());
    assert!(
        decide_in(&with(step(), "SLURM_DISTRIBUTION", "cyclic:block"))
            .unwrap()
            .is_some()
    );
}
