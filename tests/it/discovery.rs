//! Discovery end to end on loopback: ranks of one host find each other by
//! broadcast (sharing the discovery port) and a star's workers find the
//! coordinator by the authenticated, nonce-bound query; then every rank
//! runs an all-reduce.

use meshwork::{Node, ReduceOp, Topology};
use std::net::{Ipv4Addr, TcpListener, UdpSocket};
use std::time::Duration;

const TOKEN: &str = "discovery end-to-end token";

/// `n` consecutive ports free for TCP (data ports `base..base + n`) and
/// one free for UDP (the discovery port), released on return.
fn free_ports(n: u16) -> (u16, u16) {
    let disc = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)).unwrap();
    let disc_port = disc.local_addr().unwrap().port();
    for _ in 0..64 {
        let first = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let base = first.local_addr().unwrap().port();
        let rest: Option<Vec<TcpListener>> = (1..n)
            .map(|i| {
                base.checked_add(i)
                    .and_then(|p| TcpListener::bind((Ipv4Addr::LOCALHOST, p)).ok())
            })
            .collect();
        if rest.is_some() {
            return (disc_port, base);
        }
    }
    panic!("no {n} consecutive free ports");
}

fn run(nodes: Vec<Node>) {
    let world = nodes.len() as u32;
    let sums: Vec<u32> = std::thread::scope(|s| {
        let hs: Vec<_> = nodes
            .into_iter()
            .map(|node| {
                s.spawn(move || {
                    let g = node.connect().unwrap();
                    let mut v = [g.rank() + 1];
                    g.all_reduce(&mut v, ReduceOp::Sum).unwrap();
                    v[0]
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(sums, vec![world * (world + 1) / 2; world as usize]);
}

#[test]
fn a_mesh_on_one_host_forms_by_broadcast_discovery() {
    let world = 3;
    let (disc, base) = free_ports(world as u16);
    let nodes = (0..world)
        .map(|r| {
            Node::new(r, world)
                .cluster_token(TOKEN)
                .discover(disc, base)
                .interface("lo")
                .timeout(Duration::from_secs(10))
        })
        .collect();
    run(nodes);
}

#[test]
fn a_star_forms_by_query_discovery() {
    let world = 3;
    let (disc, base) = free_ports(1);
    let nodes = (0..world)
        .map(|r| {
            let n = Node::new(r, world)
                .cluster_token(TOKEN)
                .topology(Topology::Star)
                .discover(disc, base)
                .interface("lo")
                .timeout(Duration::from_secs(10));
            if r == 0 {
                n
            } else {
                n.discover_via("127.0.0.1")
            }
        })
        .collect();
    run(nodes);
}
