//! Hosts in network namespaces (see `../shared/NETLAB.md`): a LAN bridge,
//! hosts on it, a NAT router with hosts behind it, per-host rate limits and
//! cutting a host's link. Every lab has its own name prefix and subnets so
//! tests may run in parallel; stale namespaces of the same prefix are
//! removed at start, and everything is deleted when the `Lab` drops.
//! Needs root and iproute2/nftables; otherwise a test prints
//! `SKIPPED: <reason>`, and under `CI=true` it fails instead.

use std::process::Command;

pub struct Lab {
    prefix: String,
    /// Third octet of this lab's subnets: LAN 10.77.N.0/24, NAT 10.78.N.0/24.
    pub net: u8,
    namespaces: Vec<String>,
    veths: usize,
    /// Each LAN host's namespace, its interface, and its port on the
    /// bridge.
    hosts: Vec<(String, String, String)>,
}

fn run(args: &[&str]) -> Result<String, String> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .map_err(|e| format!("{}: {e}", args[0]))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "{}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// `args` run inside namespace `ns`.
fn run_in(ns: &str, args: &[&str]) -> Result<String, String> {
    let mut all = vec!["ip", "netns", "exec", ns];
    all.extend_from_slice(args);
    run(&all)
}

/// Skip (or, under `CI=true`, fail) a test that cannot run here.
pub fn skip(reason: &str) {
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("cannot run under CI: {reason}");
    }
    #[allow(clippy::print_stdout, reason = "the SKIPPED line is the test's report")]
    {
        println!("SKIPPED: {reason}");
    }
}

impl Lab {
    /// [`Lab::new`], or `None` after saying why it cannot run here
    /// (`SKIPPED: …`; under `CI=true`, a failure).
    pub fn or_skip(test: &str) -> Option<Lab> {
        Lab::new(test).map_err(|reason| skip(&reason)).ok()
    }

    /// A lab named after `test` (short, unique per test), with its bridge.
    pub fn new(test: &str) -> Result<Lab, String> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Err("network namespaces need root".into());
        }
        run(&["ip", "-V"]).map_err(|e| format!("iproute2 is missing ({e})"))?;
        let hash = test
            .bytes()
            .fold(17u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)));
        let net = (hash % 200 + 20) as u8;
        let prefix = format!("mw{net}");
        // Remove what a crashed earlier run of this test left.
        if let Ok(list) = run(&["ip", "netns", "list"]) {
            for ns in list.lines().filter_map(|l| l.split_whitespace().next()) {
                if ns.starts_with(&format!("{prefix}-")) {
                    let _ = run(&["ip", "netns", "del", ns]);
                }
            }
        }
        let mut lab = Lab {
            prefix,
            net,
            namespaces: Vec::new(),
            veths: 0,
            hosts: Vec::new(),
        };
        let br = lab.ns("br")?;
        run(&["ip", "-n", &br, "link", "add", "br0", "type", "bridge"])?;
        run(&["ip", "-n", &br, "link", "set", "br0", "up"])?;
        Ok(lab)
    }

    fn ns(&mut self, name: &str) -> Result<String, String> {
        let ns = format!("{}-{name}", self.prefix);
        run(&["ip", "netns", "add", &ns])?;
        run(&["ip", "-n", &ns, "link", "set", "lo", "up"])?;
        self.namespaces.push(ns.clone());
        Ok(ns)
    }

    /// A veth pair with one end in each namespace; returns the two names.
    fn veth(&mut self, a_ns: &str, b_ns: &str) -> Result<(String, String), String> {
        self.veths += 1;
        let (a, b) = (
            format!("{}a{}", self.prefix, self.veths),
            format!("{}b{}", self.prefix, self.veths),
        );
        run(&["ip", "link", "add", &a, "type", "veth", "peer", "name", &b])?;
        run(&["ip", "link", "set", &a, "netns", a_ns])?;
        run(&["ip", "link", "set", &b, "netns", b_ns])?;
        run(&["ip", "-n", a_ns, "link", "set", &a, "up"])?;
        run(&["ip", "-n", b_ns, "link", "set", &b, "up"])?;
        Ok((a, b))
    }

    /// A host on the LAN at 10.77.N.`octet`; returns its namespace and
    /// interface.
    pub fn lan_host(&mut self, name: &str, octet: u8) -> Result<(String, String), String> {
        let ns = self.ns(name)?;
        let br = format!("{}-br", self.prefix);
        let (dev, port) = self.veth(&ns, &br)?;
        run(&["ip", "-n", &br, "link", "set", &port, "master", "br0"])?;
        run(&[
            "ip",
            "-n",
            &ns,
            "addr",
            "add",
            &format!("10.77.{}.{octet}/24", self.net),
            "dev",
            &dev,
        ])?;
        run(&["ip", "-n", &ns, "route", "add", "default", "dev", &dev])?;
        self.hosts.push((ns.clone(), dev.clone(), port));
        Ok((ns, dev))
    }

    /// A LAN host's interface and bridge port, by namespace.
    fn host(&self, ns: &str) -> Result<&(String, String, String), String> {
        self.hosts
            .iter()
            .find(|h| h.0 == ns)
            .ok_or_else(|| format!("{ns} is not a LAN host of this lab"))
    }

    /// Cut the LAN into `sides` (host namespaces): the bridge drops every
    /// frame between hosts on different sides, both ways, and each side
    /// stays whole inside. Hosts on no side keep every link. Replaces the
    /// cut in force, if any.
    pub fn partition(&self, sides: &[Vec<String>]) -> Result<(), String> {
        self.heal_partition();
        let br = format!("{}-br", self.prefix);
        run_in(&br, &["nft", "add", "table", "bridge", "cut"])?;
        run_in(
            &br,
            &[
                "nft",
                "add chain bridge cut filt { type filter hook forward priority 0 ; }",
            ],
        )?;
        for (i, a) in sides.iter().enumerate() {
            for b in sides.iter().skip(i + 1) {
                for x in a {
                    for y in b {
                        let (px, py) = (&self.host(x)?.2, &self.host(y)?.2);
                        for (from, to) in [(px, py), (py, px)] {
                            run_in(
                                &br,
                                &[
                                    "nft", "add", "rule", "bridge", "cut", "filt", "iifname", from,
                                    "oifname", to, "drop",
                                ],
                            )?;
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Remove the cut [`partition`](Self::partition) made, if any.
    pub fn heal_partition(&self) {
        let br = format!("{}-br", self.prefix);
        let _ = run_in(&br, &["nft", "delete", "table", "bridge", "cut"]);
    }

    /// Drop `percent` % of every packet host `ns` sends and receives, at
    /// random (TCP and UDP alike); [`clear_loss`](Self::clear_loss) ends it.
    pub fn lossy(&self, ns: &str, percent: u8) -> Result<(), String> {
        self.clear_loss(ns);
        let p = percent.to_string();
        run_in(ns, &["nft", "add", "table", "inet", "nemloss"])?;
        for hook in ["input", "output"] {
            let chain = format!("{{ type filter hook {hook} priority 0 ; }}");
            run_in(
                ns,
                &["nft", "add", "chain", "inet", "nemloss", hook, &chain],
            )?;
            run_in(
                ns,
                &[
                    "nft", "add", "rule", "inet", "nemloss", hook, "oifname", "!=", "lo", "numgen",
                    "random", "mod", "100", "<", &p, "drop",
                ],
            )
            .or_else(|_| {
                // The input hook has no output interface: match the input one.
                run_in(
                    ns,
                    &[
                        "nft", "add", "rule", "inet", "nemloss", hook, "iifname", "!=", "lo",
                        "numgen", "random", "mod", "100", "<", &p, "drop",
                    ],
                )
            })?;
        }
        Ok(())
    }

    /// End [`lossy`](Self::lossy)'s loss on `ns`.
    pub fn clear_loss(&self, ns: &str) {
        let _ = run_in(ns, &["nft", "delete", "table", "inet", "nemloss"]);
    }

    /// Make host `ns`'s link slow: 2 Mbit/s out, packets queued up to
    /// 200 ms (the kernel here has no netem, so a fixed delay cannot be
    /// added: a queue that long is the nearest); [`fast`](Self::fast) ends it.
    pub fn slow(&self, ns: &str) -> Result<(), String> {
        let dev = self.host(ns)?.1.clone();
        self.fast(ns);
        run_in(
            ns,
            &[
                "tc", "qdisc", "add", "dev", &dev, "root", "tbf", "rate", "2mbit", "burst", "32kb",
                "latency", "200ms",
            ],
        )
        .map(drop)
    }

    /// End [`slow`](Self::slow) on `ns`.
    pub fn fast(&self, ns: &str) {
        if let Ok((_, dev, _)) = self.host(ns) {
            let _ = run_in(ns, &["tc", "qdisc", "del", "dev", dev, "root"]);
        }
    }

    /// Take host `ns`'s link down (`up = false`: the host is away, as if
    /// its cable were pulled) or bring it back.
    pub fn host_link(&self, ns: &str, up: bool) -> Result<(), String> {
        let dev = self.host(ns)?.1.clone();
        self.set_link(ns, &dev, up)?;
        if up {
            // Taking the link down took its default route with it.
            run(&["ip", "-n", ns, "route", "replace", "default", "dev", &dev])?;
        }
        Ok(())
    }

    /// Hosts `{prefix}{i}` on the LAN at 10.77.N.(10 + i), for each `i`;
    /// their namespaces.
    pub fn lan_hosts(
        &mut self,
        prefix: &str,
        indices: impl IntoIterator<Item = u8>,
    ) -> Result<Vec<String>, String> {
        indices
            .into_iter()
            .map(|i| Ok(self.lan_host(&format!("{prefix}{i}"), 10 + i)?.0))
            .collect()
    }

    /// A NAT router on the LAN at 10.77.N.`octet` masquerading
    /// 10.78.N.0/24, and one host behind it at 10.78.N.2.
    pub fn host_behind_nat(&mut self, name: &str, octet: u8) -> Result<String, String> {
        let (rtr, public) = self.lan_host(&format!("{name}r"), octet)?;
        let _ = run(&["ip", "-n", &rtr, "route", "del", "default"]);
        let ns = self.ns(name)?;
        let (inner, outer) = self.veth(&ns, &rtr)?;
        let net = self.net;
        run(&[
            "ip",
            "-n",
            &rtr,
            "addr",
            "add",
            &format!("10.78.{net}.1/24"),
            "dev",
            &outer,
        ])?;
        run(&[
            "ip",
            "-n",
            &ns,
            "addr",
            "add",
            &format!("10.78.{net}.2/24"),
            "dev",
            &inner,
        ])?;
        run(&[
            "ip",
            "-n",
            &ns,
            "route",
            "add",
            "default",
            "via",
            &format!("10.78.{net}.1"),
        ])?;
        run_in(&rtr, &["sysctl", "-qw", "net.ipv4.ip_forward=1"])?;
        run_in(&rtr, &["nft", "add", "table", "ip", "nat"])?;
        run_in(
            &rtr,
            &[
                "nft",
                "add chain ip nat post { type nat hook postrouting priority 100 ; }",
            ],
        )?;
        run_in(
            &rtr,
            &[
                "nft",
                "add",
                "rule",
                "ip",
                "nat",
                "post",
                "oifname",
                &public,
                "masquerade",
            ],
        )?;
        Ok(ns)
    }

    /// The NAT in front of `behind` (a namespace from
    /// [`host_behind_nat`](Self::host_behind_nat)) forgets its mappings
    /// and maps from other ports from now on (61000-61099, outside
    /// Linux's default ephemeral range, so every mapping is new): what a
    /// home router does when it reboots or its table overflows. A
    /// connection through it goes on from a new address, which its peer
    /// does not know (it answers with a reset).
    pub fn rebind_nat(&self, behind: &str) -> Result<(), String> {
        let rtr = format!("{behind}r");
        let public = self
            .hosts
            .iter()
            .find(|(ns, ..)| *ns == rtr)
            .map(|(_, dev, _)| dev.clone())
            .ok_or_else(|| format!("{behind} is not behind a NAT of this lab"))?;
        run_in(&rtr, &["nft", "flush", "chain", "ip", "nat", "post"])?;
        for rule in [
            &["meta", "l4proto", "tcp", "masquerade", "to", ":61000-61099"][..],
            &["masquerade"][..],
        ] {
            let mut args = vec![
                "nft", "add", "rule", "ip", "nat", "post", "oifname", &public,
            ];
            args.extend_from_slice(rule);
            run_in(&rtr, &args)?;
        }
        // No entry left: exit status 1 with nothing flushed is fine too.
        let _ = run_in(&rtr, &["conntrack", "-F"]);
        Ok(())
    }

    /// Limit `dev` in `ns` to `rate` (tc syntax, e.g. "50mbit").
    pub fn rate_limit(&self, ns: &str, dev: &str, rate: &str) -> Result<(), String> {
        run_in(
            ns,
            &[
                "tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate", rate, "burst", "256kb",
                "latency", "50ms",
            ],
        )
        .map(drop)
    }

    /// Drop `percent` % of the UDP datagrams `ns` sends and receives, at
    /// random (nftables; netem is not available here).
    pub fn udp_loss(&self, ns: &str, percent: u8) -> Result<(), String> {
        let p = percent.to_string();
        run_in(ns, &["nft", "add", "table", "inet", "lossy"])?;
        for hook in ["input", "output"] {
            let chain = format!("{{ type filter hook {hook} priority 0 ; }}");
            run_in(ns, &["nft", "add", "chain", "inet", "lossy", hook, &chain])?;
            run_in(
                ns,
                &[
                    "nft", "add", "rule", "inet", "lossy", hook, "meta", "l4proto", "udp",
                    "numgen", "random", "mod", "100", "<", &p, "drop",
                ],
            )?;
        }
        Ok(())
    }

    /// Make `ns` multi-homed: a second interface `dum0` at 10.99.N.`octet`
    /// that takes the default route, so that "the default route's
    /// interface" is the wrong one for the LAN.
    pub fn second_default_interface(&self, ns: &str, octet: u8) -> Result<(), String> {
        let addr = format!("10.99.{}.{octet}/24", self.net);
        // A veth pair kept inside the host: a link that leads nowhere
        // (the kernel here has no dummy interfaces).
        run_in(
            ns,
            &[
                "ip", "link", "add", "dum0", "type", "veth", "peer", "name", "dum1",
            ],
        )?;
        run_in(ns, &["ip", "addr", "add", &addr, "dev", "dum0"])?;
        run_in(ns, &["ip", "link", "set", "dum1", "up"])?;
        run_in(ns, &["ip", "link", "set", "dum0", "up"])?;
        run_in(ns, &["ip", "route", "replace", "default", "dev", "dum0"]).map(drop)
    }

    /// Cut (`up = false`) or heal a host's link.
    pub fn set_link(&self, ns: &str, dev: &str, up: bool) -> Result<(), String> {
        run(&[
            "ip",
            "-n",
            ns,
            "link",
            "set",
            dev,
            if up { "up" } else { "down" },
        ])
        .map(drop)
    }

    /// Whether `ns` can reach `ip` (one ping, one second).
    pub fn can_ping(&self, ns: &str, ip: &str) -> bool {
        run_in(ns, &["ping", "-c", "1", "-W", "1", ip]).is_ok()
    }

    /// The command prefixes that run one rank in each of `namespaces`.
    pub fn exec_in_each<S: AsRef<str>>(
        namespaces: impl IntoIterator<Item = S>,
    ) -> Vec<Vec<String>> {
        namespaces
            .into_iter()
            .map(|ns| Lab::exec_in(ns.as_ref()))
            .collect()
    }

    /// The command prefix that runs a program inside `ns`.
    pub fn exec_in(ns: &str) -> Vec<String> {
        ["ip", "netns", "exec", ns]
            .iter()
            .map(|s| s.to_string())
            .collect()
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for ns in self.namespaces.iter().rev() {
            let _ = run(&["ip", "netns", "del", ns]);
        }
    }
}
