//! TLS material of a QUIC group: a cluster CA and one leaf per rank.
//!
//! The CA's key is derived from a secret every rank holds (the cluster
//! token, or on loopback without one, the job's public parameters), so
//! each rank can rebuild the same CA key on its own and sign its own leaf;
//! a seed may instead hand out both. A leaf names its rank in
//! its subject alternative name (`rank-<r>.meshwork`), so a peer that
//! presents a leaf from this CA is a member *and* says which member.
//!
//! Keys are ECDSA P-256. The CA key is `1 + (HMAC-SHA256(secret,
//! "meshwork cluster CA") mod (n − 1))`; leaf keys are fresh for every run.

use boring::asn1::{Asn1Integer, Asn1Time};
use boring::bn::{BigNum, BigNumContext};
use boring::ec::{EcGroup, EcKey, EcPoint};
use boring::error::ErrorStack;
use boring::hash::MessageDigest;
use boring::nid::Nid;
use boring::pkey::{PKey, Private};
use boring::ssl::{SslContextBuilder, SslMethod, SslVerifyMode, SslVersion};
use boring::stack::Stack;
use boring::x509::extension::{BasicConstraints, KeyUsage, SubjectAlternativeName};
use boring::x509::store::X509StoreBuilder;
use boring::x509::{X509Name, X509StoreContext, X509};
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// A cluster's certificate authority.
#[derive(Clone)]
pub struct ClusterCa {
    key: PKey<Private>,
    cert: X509,
}

impl std::fmt::Debug for ClusterCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClusterCa(..)")
    }
}

/// One rank's identity: its leaf and key, and the CA it trusts.
#[derive(Clone)]
pub struct RankIdentity {
    pub(crate) rank: u32,
    pub(crate) ca: X509,
    pub(crate) cert: X509,
    pub(crate) key: PKey<Private>,
}

impl std::fmt::Debug for RankIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RankIdentity(rank {})", self.rank)
    }
}

/// The DNS name a rank's leaf carries and its peers verify.
pub fn rank_name(rank: u32) -> String {
    format!("rank-{rank}.meshwork")
}

/// The rank a DER leaf names, if it names exactly one.
pub(crate) fn rank_of(der: &[u8]) -> Option<u32> {
    let cert = X509::from_der(der).ok()?;
    let names = cert.subject_alt_names()?;
    let mut ranks = names.iter().filter_map(|n| {
        n.dnsname()?
            .strip_prefix("rank-")?
            .strip_suffix(".meshwork")?
            .parse::<u32>()
            .ok()
    });
    let rank = ranks.next()?;
    ranks.next().is_none().then_some(rank)
}

fn name(common: &str) -> Result<X509Name, ErrorStack> {
    let mut n = X509Name::builder()?;
    n.append_entry_by_nid(Nid::ORGANIZATIONNAME, "meshwork")?;
    n.append_entry_by_nid(Nid::COMMONNAME, common)?;
    Ok(n.build())
}

fn p256() -> Result<EcGroup, ErrorStack> {
    EcGroup::from_curve_name(Nid::X9_62_PRIME256V1)
}

impl ClusterCa {
    /// The CA every holder of `secret` derives alike.
    pub fn derive(secret: &[u8]) -> Result<ClusterCa, ErrorStack> {
        let group = p256()?;
        let mut ctx = BigNumContext::new()?;
        let mut order = BigNum::new()?;
        group.order(&mut order, &mut ctx)?;
        let mut mac =
            <Hmac<Sha256> as Mac>::new_from_slice(secret).expect("HMAC takes any key length");
        mac.update(b"meshwork cluster CA");
        let digest = mac.finalize().into_bytes();
        // 1 + (h mod (n - 1)): in [1, n - 1], a valid private scalar.
        let h = BigNum::from_slice(&digest)?;
        let mut n1 = BigNum::new()?;
        let one = BigNum::from_u32(1)?;
        n1.checked_sub(&order, &one)?;
        let mut r = BigNum::new()?;
        r.nnmod(&h, &n1, &mut ctx)?;
        let mut scalar = BigNum::new()?;
        scalar.checked_add(&r, &one)?;
        let mut public = EcPoint::new(&group)?;
        public.mul_generator(&group, &scalar, &ctx)?;
        let key = PKey::from_ec_key(EcKey::from_private_components(&group, &scalar, &public)?)?;

        let mut b = X509::builder()?;
        b.set_version(2)?;
        let serial = Asn1Integer::from_bn(&one)?;
        b.set_serial_number(&serial)?;
        let subject = name("meshwork cluster CA")?;
        b.set_subject_name(&subject)?;
        b.set_issuer_name(&subject)?;
        b.set_pubkey(&key)?;
        // Fixed validity: every rank's copy of the CA is the same but for
        // its (randomised) signature.
        let (from, until) = (
            Asn1Time::from_unix(1_704_067_200)?, // 2024-01-01
            Asn1Time::from_unix(4_102_444_800)?, // 2100-01-01
        );
        b.set_not_before(&from)?;
        b.set_not_after(&until)?;
        b.append_extension(BasicConstraints::new().critical().ca().build()?)?;
        b.append_extension(
            KeyUsage::new()
                .critical()
                .key_cert_sign()
                .crl_sign()
                .build()?,
        )?;
        b.sign(&key, MessageDigest::sha256())?;
        Ok(ClusterCa {
            key,
            cert: b.build(),
        })
    }

    /// A fresh CA nobody else can derive (a seed's).
    pub fn random() -> Result<ClusterCa, ErrorStack> {
        let mut secret = [0u8; 32];
        boring::rand::rand_bytes(&mut secret)?;
        ClusterCa::derive(&secret)
    }

    /// The CA of a token-protected job (its key from the
    /// token through the slow KDF).
    pub fn from_token(token: &str) -> Result<ClusterCa, ErrorStack> {
        ClusterCa::derive(&super::kdf::subkey(token, "cluster CA"))
    }

    /// A leaf for `rank` with a fresh key, signed by this CA.
    pub fn issue(&self, rank: u32) -> Result<RankIdentity, ErrorStack> {
        let group = p256()?;
        let key = PKey::from_ec_key(EcKey::generate(&group)?)?;
        let mut b = X509::builder()?;
        b.set_version(2)?;
        let mut serial = BigNum::new()?;
        serial.rand(63, boring::bn::MsbOption::MAYBE_ZERO, false)?;
        let serial = Asn1Integer::from_bn(&serial)?;
        b.set_serial_number(&serial)?;
        let subject = name(&rank_name(rank))?;
        b.set_subject_name(&subject)?;
        b.set_issuer_name(self.cert.subject_name())?;
        b.set_pubkey(&key)?;
        // A day's slack either side for clocks that disagree.
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let now = libc::time_t::try_from(now).unwrap_or(libc::time_t::MAX);
        let from = Asn1Time::from_unix(now.saturating_sub(86_400))?;
        let until = Asn1Time::from_unix(now.saturating_add(366 * 86_400))?;
        b.set_not_before(&from)?;
        b.set_not_after(&until)?;
        b.append_extension(BasicConstraints::new().build()?)?;
        b.append_extension(KeyUsage::new().critical().digital_signature().build()?)?;
        let san = SubjectAlternativeName::new()
            .dns(&rank_name(rank))
            .build(&b.x509v3_context(Some(&self.cert), None))?;
        b.append_extension(san)?;
        b.sign(&self.key, MessageDigest::sha256())?;
        Ok(RankIdentity {
            rank,
            ca: self.cert.clone(),
            cert: b.build(),
            key,
        })
    }
}

/// Whether `leaf` verifies with `ca` as its only trust anchor (signature,
/// validity, the CA's constraints).
fn chains_to(ca: &X509, leaf: &X509) -> Result<bool, ErrorStack> {
    let mut store = X509StoreBuilder::new()?;
    store.add_cert(ca.clone())?;
    let store = store.build();
    let chain = Stack::new()?;
    X509StoreContext::new()?.init(&store, leaf, &chain, |c| c.verify_cert())
}

impl RankIdentity {
    /// The rank this identity's leaf names.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// CA certificate, leaf certificate and leaf key, DER (the key PKCS#8
    /// or the key's own DER).
    pub(crate) fn to_der(&self) -> Result<[Vec<u8>; 3], ErrorStack> {
        Ok([
            self.ca.to_der()?,
            self.cert.to_der()?,
            self.key.private_key_to_der()?,
        ])
    }

    /// The inverse of `to_der`; `None` if any part does not parse, the
    /// leaf does not name `rank`, does not chain to `ca` or is not `key`'s.
    pub(crate) fn from_der(rank: u32, ca: &[u8], cert: &[u8], key: &[u8]) -> Option<RankIdentity> {
        if rank_of(cert) != Some(rank) {
            return None;
        }
        let (ca, cert) = (X509::from_der(ca).ok()?, X509::from_der(cert).ok()?);
        let key = PKey::private_key_from_der(key).ok()?;
        let fits = cert.public_key().ok()?.public_eq(&key);
        (fits && chains_to(&ca, &cert).unwrap_or(false)).then_some(RankIdentity {
            rank,
            ca,
            cert,
            key,
        })
    }

    /// A TLS 1.3 context presenting this leaf and admitting only peers
    /// with a leaf from the same CA — in both roles: a server refuses a
    /// client without a certificate (`FAIL_IF_NO_PEER_CERT`; quiche's own
    /// `verify_peer(true)` would not), a client refuses a server whose leaf
    /// is not from this CA or does not name the rank it dialled.
    pub fn ssl_context(&self) -> Result<SslContextBuilder, ErrorStack> {
        let mut b = SslContextBuilder::new(SslMethod::tls())?;
        b.set_min_proto_version(Some(SslVersion::TLS1_3))?;
        b.set_certificate(&self.cert)?;
        b.set_private_key(&self.key)?;
        b.check_private_key()?;
        b.cert_store_mut().add_cert(self.ca.clone())?;
        b.set_verify(SslVerifyMode::PEER | SslVerifyMode::FAIL_IF_NO_PEER_CERT);
        Ok(b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ca_is_the_same_for_every_holder_of_the_token() {
        let a = ClusterCa::from_token("s3cret s3cret s3cret").unwrap();
        let b = ClusterCa::from_token("s3cret s3cret s3cret").unwrap();
        let c = ClusterCa::from_token("other other other").unwrap();
        let pk = |ca: &ClusterCa| ca.cert.public_key().unwrap().public_key_to_der().unwrap();
        assert_eq!(pk(&a), pk(&b));
        assert_ne!(pk(&a), pk(&c));
        // A leaf signed by one copy verifies against the other copy.
        let leaf = a.issue(3).unwrap();
        assert!(leaf.cert.verify(&b.cert.public_key().unwrap()).unwrap());
        assert!(!leaf.cert.verify(&c.cert.public_key().unwrap()).unwrap());
    }

    #[test]
    fn an_identity_is_taken_only_with_a_leaf_that_chains_to_its_ca() {
        let (ca, other) = (ClusterCa::random().unwrap(), ClusterCa::random().unwrap());
        let [ca_der, cert, key] = ca.issue(2).unwrap().to_der().unwrap();
        assert!(RankIdentity::from_der(2, &ca_der, &cert, &key).is_some());
        assert!(RankIdentity::from_der(3, &ca_der, &cert, &key).is_none());
        let [other_ca, _, other_key] = other.issue(2).unwrap().to_der().unwrap();
        assert!(RankIdentity::from_der(2, &other_ca, &cert, &key).is_none());
        assert!(RankIdentity::from_der(2, &ca_der, &cert, &other_key).is_none());
        // One flipped byte of the CA's subject name or public key: refused.
        let find = |what: &[u8]| ca_der.windows(what.len()).rposition(|w| w == what).unwrap();
        let point = ca.cert.public_key().unwrap().public_key_to_der().unwrap();
        let in_key = find(&point[point.len() - 40..]) + 10;
        for at in [find(b"meshwork cluster CA") + 3, in_key] {
            let mut bad = ca_der.clone();
            bad[at] ^= 1;
            assert!(
                RankIdentity::from_der(2, &bad, &cert, &key).is_none(),
                "{at}"
            );
        }
    }

    #[test]
    fn a_leaf_names_its_rank() {
        let ca = ClusterCa::from_token("a test token of enough bytes").unwrap();
        let leaf = ca.issue(7).unwrap();
        assert_eq!(rank_of(&leaf.cert.to_der().unwrap()), Some(7));
        assert_eq!(rank_of(&ca.cert.to_der().unwrap()), None);
        assert_eq!(rank_of(b"not a certificate"), None);
    }
}
