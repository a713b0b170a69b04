//! `Node::from_env`: a node from the environment (the one table of
//! variables is `src/env.rs`), after a launcher's own variables are
//! translated into the table's (`kubernetes.rs`, `slurm.rs`: each a
//! [`Launcher`] that says whether it applies here and what it yields).

use super::*;

/// What a launcher's environment says: where the seed listens, and this
/// process's rank and the world where the table's own variables (its
/// aliases included) do not say them.
pub(super) struct Launched {
    pub(super) seed: String,
    pub(super) rank: Option<u32>,
    pub(super) world: Option<u32>,
}

/// A launcher whose environment tells where the peers are: `None` where
/// it does not apply (another launcher, or `SEED`, `PEERS` or `DISCOVER`
/// set), else what it yields, the seed's name resolving.
type Launcher = fn() -> Result<Option<Launched>>;

/// The launchers, asked in this order; the first that applies is used.
const LAUNCHERS: [Launcher; 2] = [kubernetes::launched, slurm::launched];

/// The first launcher's environment that applies, in the table's words
/// (`RANK`, `WORLD`, `SEED`) until the guard drops.
fn translate_launcher() -> Result<Option<crate::env::Translated>> {
    for launched in LAUNCHERS {
        if let Some(l) = launched()? {
            let mut values = vec![("SEED", l.seed)];
            values.extend(l.rank.map(|r| ("RANK", r.to_string())));
            values.extend(l.world.map(|w| ("WORLD", w.to_string())));
            return Ok(Some(crate::env::translate(values)));
        }
    }
    Ok(None)
}

impl Node {
    /// Read the environment (the table in `meshwork::env::VARS`). A
    /// malformed variable is an error that names it.
    pub fn from_env() -> Result<Node> {
        let _translated = translate_launcher()?;
        // The seed's other addresses, where its name resolves to several.
        let mut seed_also = Vec::new();
        let mut resolve_seed = |hostport: &str| {
            resolve(hostport).map(|(first, also)| {
                seed_also = also;
                first
            })
        };
        let seed = match lookup("SEED") {
            None => None,
            Some(("MASTER_ADDR", value)) => {
                let (_, port) = lookup("MASTER_PORT").ok_or_else(|| {
                    bad(
                        "MASTER_PORT",
                        "",
                        "MASTER_ADDR needs MASTER_PORT (the seed's port)",
                    )
                })?;
                let hostport = format!("{value}:{port}");
                Some(
                    resolve_seed(&hostport)
                        .map_err(|e| bad("MASTER_ADDR", &hostport, &e.to_string()))?,
                )
            }
            Some((name, value)) => {
                Some(resolve_seed(&value).map_err(|e| bad(name, &value, &e.to_string()))?)
            }
        };
        let rank = parse::<u32>("RANK")?;
        let world = parse::<u32>("WORLD")?.unwrap_or(1);
        if world == 0 {
            return Err(bad("WORLD", "0", "a group needs at least one rank"));
        }
        let mut node = match (rank, seed) {
            (None, Some(_)) => Node::join(world),
            (rank, _) => Node::new(rank.unwrap_or(0), world),
        };
        node.seed = seed;
        node.seed_also = seed_also;
        node.interface = lookup("IFNAME").map(|(_, v)| v);
        if let Some((n, v)) = lookup("ADVERTISE") {
            let addr = v
                .parse::<SocketAddr>()
                .or_else(|_| {
                    v.parse::<std::net::IpAddr>()
                        .map(|ip| SocketAddr::new(ip, 0))
                })
                .map_err(|_| bad(n, &v, "expected an IP address, optionally with :port"))?;
            node.advertise = Some(addr);
        }
        let star_flag = parse::<u8>("DIAL_OUT")?.is_some_and(|v| v == 1);
        node.topology = match lookup("TOPOLOGY") {
            None if star_flag => Topology::Star,
            None => Topology::Mesh,
            Some((_, v)) if v.eq_ignore_ascii_case("mesh") => Topology::Mesh,
            Some((_, v)) if v.eq_ignore_ascii_case("star") => Topology::Star,
            Some((_, v)) if v.eq_ignore_ascii_case("hypercube") => Topology::Hypercube,
            Some((n, v)) => match v.split_once(':') {
                Some((k, d)) if k.eq_ignore_ascii_case("kregular") => Topology::KRegular {
                    degree: d.trim().parse().map_err(|_| {
                        bad(n, &v, "expected kregular:<even degree>, e.g. kregular:4")
                    })?,
                },
                Some((k, f)) if k.eq_ignore_ascii_case("tree") => Topology::Tree {
                    fanout: f
                        .trim()
                        .parse()
                        .map_err(|_| bad(n, &v, "expected tree:<fanout>, e.g. tree:32"))?,
                },
                _ => {
                    return Err(bad(
                        n,
                        &v,
                        "expected mesh, star, kregular:<degree>, hypercube or tree:<fanout>",
                    ))
                }
            },
        };
        node.transport = match lookup("TRANSPORT") {
            None => TransportKind::Quic,
            Some((_, v)) if v.eq_ignore_ascii_case("tcp") => TransportKind::Tcp,
            Some((_, v)) if v.eq_ignore_ascii_case("quic") => TransportKind::Quic,
            Some((n, v)) => return Err(bad(n, &v, "expected quic or tcp")),
        };
        if let Some(t) = parse::<usize>("SIDECAR_THRESHOLD")? {
            node.sidecar_threshold = t;
        }
        // A switch: 0 or 1.
        let switch = |name: &str| -> Result<Option<bool>> {
            match parse::<u8>(name)? {
                None => Ok(None),
                Some(e @ (0 | 1)) => Ok(Some(e == 1)),
                Some(e) => Err(bad(name, &e.to_string(), "expected 0 or 1")),
            }
        };
        if let Some(on) = switch("ENCRYPT_BULK")? {
            node.encrypt_bulk = on;
        }
        if let Some(on) = switch("FRAME_AUTH")? {
            node.frame_auth = on;
        }
        if let Some(on) = switch("SHM")? {
            node.shared_memory = on;
        }
        if let Some(n) = parse::<usize>("SHM_SINGLE_COPY")? {
            node.shm_single_copy = n;
        }
        if let Some(mb) = parse::<u64>("HEAP_MB")? {
            node.heap_bytes = mb
                .checked_mul(1 << 20)
                .and_then(|b| usize::try_from(b).ok())
                .ok_or_else(|| bad("HEAP_MB", &mb.to_string(), "too large for this machine"))?;
        }
        if let Some((n, v)) = lookup("RECOVERY") {
            node.recovery = Recovery::parse(&v)
                .ok_or_else(|| bad(n, &v, "expected manual, abort or shrink"))?;
        }
        if let Some((n, v)) = lookup("QUORUM") {
            node.quorum = Quorum::parse(&v).ok_or_else(|| {
                bad(
                    n,
                    &v,
                    "expected majority, a number of members, or unsafe:<n>",
                )
            })?;
        }
        if let Some((n, v)) = lookup("TIMEOUT_S") {
            node.timeout = positive_seconds(n, &v)?;
        }
        if let Some((n, v)) = lookup("LIVENESS_S") {
            node.liveness = positive_seconds(n, &v)?;
        }
        if let Some((n, v)) = lookup("FLEET_AWAY_S") {
            node = node.fleet(positive_seconds(n, &v)?);
        }
        if let Some(max) = parse::<u64>("MAX_MESSAGE_BYTES")? {
            node.max_message_bytes = max;
        }
        if let Some(b) = parse::<u64>("PEER_BUDGET_BYTES")? {
            node.peer_budget_bytes = b;
        }
        if let Some(d) = parse::<u32>("LANE_DEPTH")? {
            if d == 0 {
                return Err(bad(
                    "LANE_DEPTH",
                    "0",
                    "a lane must hold at least one message",
                ));
            }
            node.lane_depth = d;
        }
        node.token = lookup("CLUSTER_TOKEN").map(|(_, v)| v);
        // A launcher that derived the token's key once hands it on; a key
        // for another token is ignored (the derivation runs as usual).
        if let (Some(token), Some((_, key))) = (&node.token, lookup("CLUSTER_TOKEN_KEY")) {
            meshwork_transport::kdf::adopt_derived_key(token, &key);
        }
        let base = parse::<u16>("DATA_PORT")?.unwrap_or(29500);
        (node.peers, node.peers_also) = match lookup("PEERS") {
            Some((n, v)) => v
                .split(',')
                .map(|p| resolve(p.trim()).map_err(|e| bad(n, &v, &e.to_string())))
                .collect::<Result<Vec<_>>>()?
                .into_iter()
                .unzip(),
            None => (0..world)
                .map(|r| {
                    let port = u16::try_from(u32::from(base) + r).map_err(|_| {
                        bad("DATA_PORT", &base.to_string(), "base + rank exceeds 65535")
                    })?;
                    Ok(SocketAddr::from(([127, 0, 0, 1], port)))
                })
                .collect::<Result<Vec<_>>>()
                .map(|peers| (peers, Vec::new()))?,
        };
        match parse::<u8>("DISCOVER")? {
            None | Some(0) => {}
            Some(1) => {
                let disc = parse::<u16>("DISC_PORT")?.unwrap_or(29600);
                node = node.discover(disc, base);
                if let Some((_, host)) = lookup("DISCOVER_HOST") {
                    node = node.discover_via(host);
                }
            }
            Some(v) => return Err(bad("DISCOVER", &v.to_string(), "expected 0 or 1")),
        }
        for coll in Collective::ALL {
            let name = format!("ALGO_{}", coll.name().to_ascii_uppercase());
            if let Ok(v) = std::env::var(&name) {
                let algo = Algorithm::from_name(v.trim())
                    .filter(|a| coll.algorithms().contains(a))
                    .ok_or_else(|| {
                        let names: Vec<_> = coll.algorithms().iter().map(|a| a.name()).collect();
                        bad(&name, &v, &format!("expected one of {}", names.join(", ")))
                    })?;
                node.algorithms.push((coll, algo));
            }
        }
        Ok(node)
    }
}

/// A positive, finite number of seconds (`60`, `2.5`).
fn positive_seconds(name: &str, v: &str) -> Result<Duration> {
    let secs: f64 = v
        .parse()
        .map_err(|_| bad(name, v, "expected seconds, e.g. 60 or 2.5"))?;
    if !(secs.is_finite() && secs > 0.0 && secs < 1e9) {
        return Err(bad(name, v, "expected a positive number of seconds"));
    }
    Ok(Duration::from_secs_f64(secs))
}

fn bad(name: &str, value: &str, why: &str) -> Error {
    Error::InvalidArgument(format!("{name}={value:?}: {why}"))
}

fn parse<T: std::str::FromStr>(name: &str) -> Result<Option<T>> {
    match lookup(name) {
        None => Ok(None),
        Some((n, v)) => v
            .parse()
            .map(Some)
            .map_err(|_| bad(n, &v, &format!("expected {}", std::any::type_name::<T>()))),
    }
}
