#include "service/auth.h"

#include <openssl/asn1.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "net/tls_conn.h"
#include "util/atomic_file.h"
#include "util/log.h"

namespace kmpc::service {
namespace {

struct X509Free { void operator()(X509* x) const { X509_free(x); } };
struct CrlFree { void operator()(X509_CRL* c) const { X509_CRL_free(c); } };
struct BioFree { void operator()(BIO* b) const { BIO_free(b); } };
struct BnFree { void operator()(BIGNUM* b) const { BN_free(b); } };
using X509Ptr = std::unique_ptr<X509, X509Free>;
using CrlPtr = std::unique_ptr<X509_CRL, CrlFree>;
using BioPtr = std::unique_ptr<BIO, BioFree>;

BioPtr MemBio(const std::string& s) {
  return BioPtr(BIO_new_mem_buf(s.data(), static_cast<int>(s.size())));
}

std::shared_ptr<X509_NAME> NameCopy(const X509_NAME* name) {
  X509_NAME* dup = name != nullptr ? X509_NAME_dup(name) : nullptr;
  if (dup == nullptr) return nullptr;
  return std::shared_ptr<X509_NAME>(dup, X509_NAME_free);
}

std::string NameText(const X509_NAME* name) {
  char buf[256];
  X509_NAME_oneline(name, buf, sizeof(buf));
  return buf;
}

std::string SerialHex(const ASN1_INTEGER* serial) {
  std::unique_ptr<BIGNUM, BnFree> bn(ASN1_INTEGER_to_BN(serial, nullptr));
  if (bn == nullptr) return "";
  char* hex = BN_bn2hex(bn.get());
  std::string out = hex != nullptr ? hex : "";
  OPENSSL_free(hex);
  return out;
}

// Identifies a CA in the CRL state file: SHA-256 over its subject's DER
// and its public key (a new CA with the same name starts a new sequence).
std::string CaKey(X509* ca) {
  unsigned char* der = nullptr;
  int n = i2d_X509_NAME(X509_get_subject_name(ca), &der);
  const ASN1_BIT_STRING* pub = X509_get0_pubkey_bitstr(ca);
  if (n <= 0 || pub == nullptr) {
    OPENSSL_free(der);
    return "";
  }
  std::string in(reinterpret_cast<char*>(der), n);
  OPENSSL_free(der);
  in.append(reinterpret_cast<const char*>(ASN1_STRING_get0_data(pub)),
            ASN1_STRING_length(pub));
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_Digest(in.data(), in.size(), md, &len, EVP_sha256(), nullptr) != 1) return "";
  return absl::BytesToHexString(absl::string_view(reinterpret_cast<char*>(md), len));
}

// A non-negative number as upper-case hex without leading zeros ("0" for
// zero), so that NumberLess can compare two of them; "" if negative.
std::string NumberHex(const ASN1_INTEGER* v) {
  std::unique_ptr<BIGNUM, BnFree> bn(ASN1_INTEGER_to_BN(v, nullptr));
  if (bn == nullptr || BN_is_negative(bn.get())) return "";
  char* hex = BN_bn2hex(bn.get());
  std::string out = hex != nullptr ? hex : "";
  OPENSSL_free(hex);
  size_t z = out.find_first_not_of('0');
  return z == std::string::npos ? "0" : out.substr(z);
}

bool NumberLess(const std::string& a, const std::string& b) {
  return a.size() != b.size() ? a.size() < b.size() : a < b;
}

bool IsNumberHex(absl::string_view s) {
  if (s.empty() || (s.size() > 1 && s[0] == '0')) return false;
  for (char c : s)
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c)) && !(c >= 'A' && c <= 'F'))
      return false;
  return true;
}

// "YYYYMMDDHHMMSSZ" (GeneralizedTime), comparable as a string.
std::string TimeKey(const ASN1_TIME* t) {
  if (t == nullptr) return "";
  ASN1_GENERALIZEDTIME* g = ASN1_TIME_to_generalizedtime(t, nullptr);
  if (g == nullptr) return "";
  std::string out(reinterpret_cast<const char*>(ASN1_STRING_get0_data(g)),
                  ASN1_STRING_length(g));
  ASN1_GENERALIZEDTIME_free(g);
  return out;
}

bool ReadWholeFile(const std::string& path, std::string* out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  std::stringstream ss;
  ss << f.rdbuf();
  *out = ss.str();
  return !f.bad();
}

bool SameFile(const struct stat& a, const struct stat& b) {
  return a.st_dev == b.st_dev && a.st_ino == b.st_ino && a.st_size == b.st_size &&
         a.st_mtim.tv_sec == b.st_mtim.tv_sec && a.st_mtim.tv_nsec == b.st_mtim.tv_nsec;
}

// At most one log line per (certificate, reason) every 10 s: a revoked KDC
// retries every batch and must not flood the log.
bool ShouldLogDenial(const std::string& key) {
  static absl::Mutex mu(absl::kConstInit);
  static auto* last = new std::map<std::string, absl::Time>();
  absl::MutexLock lock(&mu);
  const absl::Time now = absl::Now();
  auto it = last->find(key);
  if (it != last->end() && now - it->second < absl::Seconds(10)) return false;
  if (last->size() > 1000) last->clear();
  (*last)[key] = now;
  return true;
}

// What the checks need from a client certificate. Parsing the PEM is not
// cheap (OpenSSL 3 decodes the public key too), and a client presents the
// same certificate on every RPC: the facts are cached by the PEM text (they
// never change for a given certificate; revocation is looked up each time).
struct CertFacts {
  std::shared_ptr<X509_NAME> issuer;
  std::string serial_hex;
  Sha256 sha256{};
  std::string sha256_hex;
};

std::shared_ptr<const CertFacts> FactsOf(absl::string_view pem) {
  static absl::Mutex mu(absl::kConstInit);
  static auto* cache = new std::map<std::string, std::shared_ptr<const CertFacts>,
                                    std::less<>>();
  {
    absl::MutexLock lock(&mu);
    auto it = cache->find(pem);
    if (it != cache->end()) return it->second;
  }
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  X509Ptr cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  ERR_clear_error();
  auto f = std::make_shared<CertFacts>();
  unsigned int n = 0;
  if (cert == nullptr ||
      X509_digest(cert.get(), EVP_sha256(), f->sha256.data(), &n) != 1 || n != 32)
    return nullptr;
  f->issuer = NameCopy(X509_get_issuer_name(cert.get()));
  if (f->issuer == nullptr) return nullptr;
  f->serial_hex = SerialHex(X509_get0_serialNumber(cert.get()));
  f->sha256_hex = absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(f->sha256.data()), 32));
  absl::MutexLock lock(&mu);
  if (cache->size() >= 256) cache->clear();
  (*cache)[std::string(pem)] = f;
  return f;
}

// The certificates of a PEM CA file (none if it holds none).
std::vector<X509Ptr> ReadCaCerts(const std::string& ca_pem) {
  std::vector<X509Ptr> cas;
  BioPtr bio = MemBio(ca_pem);
  while (X509* c = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr))
    cas.emplace_back(c);
  ERR_clear_error();
  return cas;
}

// The current time as TimeKey writes it ("YYYYMMDDHHMMSSZ").
std::string NowTimeKey() {
  ASN1_TIME* t = X509_gmtime_adj(nullptr, 0);
  std::string k = TimeKey(t);
  ASN1_TIME_free(t);
  return k;
}

// The index in cas of the CA that signed crl, or -1 if none did.
int SigningCa(X509_CRL* crl, const std::vector<X509Ptr>& cas) {
  const X509_NAME* issuer = X509_CRL_get_issuer(crl);
  int signer = -1;
  for (size_t i = 0; i < cas.size(); ++i) {
    const X509Ptr& ca = cas[i];
    if (X509_NAME_cmp(X509_get_subject_name(ca.get()), issuer) != 0) continue;
    // A CA whose keyUsage is present must allow cRLSign.
    if ((X509_get_extension_flags(ca.get()) & EXFLAG_KUSAGE) != 0 &&
        (X509_get_key_usage(ca.get()) & KU_CRL_SIGN) == 0)
      continue;
    EVP_PKEY* key = X509_get0_pubkey(ca.get());
    if (key != nullptr && X509_CRL_verify(crl, key) == 1) {
      signer = static_cast<int>(i);
      break;
    }
  }
  ERR_clear_error();
  return signer;
}

// The CRL Number extension of crl (NumberHex), empty if absent or invalid.
std::string CrlNumberHex(X509_CRL* crl) {
  std::string number;
  int crit = 0;
  ASN1_INTEGER* num = static_cast<ASN1_INTEGER*>(
      X509_CRL_get_ext_d2i(crl, NID_crl_number, &crit, nullptr));
  if (num != nullptr) number = NumberHex(num);
  ASN1_INTEGER_free(num);
  ERR_clear_error();
  return number;
}

struct PeerCert {
  std::string cn;
  std::shared_ptr<const CertFacts> facts;  // null unless the policy needs it
  std::string serial_hex;
  std::string sha256_hex;
};

}  // namespace

// ------------------------------------------------------------ RevocationList

absl::StatusOr<std::shared_ptr<RevocationList>> RevocationList::Open(
    const std::string& crl_path, const std::string& ca_path, const std::string& state_path) {
  std::string ca_pem;
  if (!ReadWholeFile(ca_path, &ca_pem) || ca_pem.empty())
    return absl::InvalidArgumentError(absl::StrCat("cannot read the CA file ", ca_path));
  std::shared_ptr<RevocationList> list(
      new RevocationList(crl_path, std::move(ca_pem), state_path));
  absl::MutexLock lock(&list->load_mu_);
  if (absl::Status st = list->ReadStateLocked(); !st.ok()) return st;
  if (absl::Status st = list->LoadLocked(true); !st.ok()) return st;
  return list;
}

// The state file: "<CaKey> <highest CRL Number, hex>" lines.
absl::Status RevocationList::ReadStateLocked() {
  if (state_path_.empty()) return absl::OkStatus();
  std::ifstream f(state_path_);
  if (!f) {
    if (errno == ENOENT) return absl::OkStatus();  // first start
    return absl::InvalidArgumentError(absl::StrCat(
        "CRL state file ", state_path_, ": cannot read it: ", strerror(errno)));
  }
  std::string line;
  for (int n = 1; std::getline(f, line); ++n) {
    absl::string_view l = absl::StripAsciiWhitespace(line);
    if (l.empty() || l[0] == '#') continue;
    std::vector<absl::string_view> parts = absl::StrSplit(l, ' ', absl::SkipEmpty());
    bool ok = parts.size() == 2 && !parts[0].empty() && parts[0].size() % 2 == 0 &&
              IsNumberHex(parts[1]);
    for (char c : ok ? parts[0] : absl::string_view())
      ok = ok && absl::ascii_isxdigit(static_cast<unsigned char>(c));
    if (!ok)
      return absl::InvalidArgumentError(absl::StrCat(
          "CRL state file ", state_path_, ": line ", n,
          " is not '<CA key hex> <CRL Number hex>' (remove the file to start "
          "over, which forgets which CRLs were seen)"));
    std::string& h = highest_[absl::AsciiStrToLower(parts[0])];
    if (h.empty() || NumberLess(h, std::string(parts[1]))) h = std::string(parts[1]);
  }
  if (f.bad())
    return absl::InvalidArgumentError(
        absl::StrCat("CRL state file ", state_path_, ": read error"));
  return absl::OkStatus();
}

absl::Status RevocationList::WriteStateLocked() {
  if (state_path_.empty()) return absl::OkStatus();
  std::string text =
      "# kmpc-mpc-server: highest CRL Number accepted per CA (SHA-256 of its subject "
      "and public key); "
      "an older CRL is refused\n";
  for (const auto& [key, number] : highest_) absl::StrAppend(&text, key, " ", number, "\n");
  const size_t slash = state_path_.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : state_path_.substr(0, slash);
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    return absl::InternalError(absl::StrCat("mkdir ", dir, ": ", strerror(errno)));
  return util::WriteFileAtomically(state_path_, text);
}

absl::StatusOr<std::shared_ptr<const RevocationList::Snapshot>> RevocationList::Parse(
    const std::string& pem) const {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("CRL file ", crl_path_, ": ", why));
  };
  std::vector<X509Ptr> cas = ReadCaCerts(ca_pem_);
  if (cas.empty()) return bad("the CA file holds no PEM certificate");
  auto snap = std::make_shared<Snapshot>();
  for (const X509Ptr& ca : cas)
    snap->ca_names[CaKey(ca.get())] =
        NameText(X509_get_subject_name(ca.get()));
  std::vector<bool> ca_signed(cas.size(), false);
  BioPtr bio = MemBio(pem);
  int n = 0;
  const std::string now_key = NowTimeKey();
  while (X509_CRL* raw = PEM_read_bio_X509_CRL(bio.get(), nullptr, nullptr, nullptr)) {
    CrlPtr crl(raw);
    ++n;
    const X509_NAME* issuer = X509_CRL_get_issuer(crl.get());
    // A delta CRL only lists changes since a base CRL: not supported.
    if (X509_CRL_get_ext_by_NID(crl.get(), NID_delta_crl, -1) >= 0)
      return bad("delta CRLs are not supported");
    const int signer = SigningCa(crl.get(), cas);
    if (signer < 0)
      return bad(absl::StrCat("CRL ", n, " (issuer ", NameText(issuer),
                              ") is not signed by a CA of --ca"));
    ca_signed[signer] = true;
    if (absl::Status st = AddCrl(crl.get(), n, CaKey(cas[signer].get()), now_key, *snap);
        !st.ok())
      return st;
  }
  // PEM_read_bio_X509_CRL's "no start line" at the end of the input.
  ERR_clear_error();
  if (n == 0) return bad("no PEM \"X509 CRL\" block");
  for (size_t i = 0; i < cas.size(); ++i)
    if (!ca_signed[i])
      snap->cas_without_crl.push_back(
          absl::StrCat(NameText(X509_get_subject_name(cas[i].get())), " (certificate ",
                       i + 1, " of the CA file)"));
  return std::shared_ptr<const Snapshot>(std::move(snap));
}

absl::Status RevocationList::AddCrl(X509_CRL* crl, int n, const std::string& ca_key,
                                    const std::string& now_key, Snapshot& snap) const {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("CRL file ", crl_path_, ": ", why));
  };
  const X509_NAME* issuer = X509_CRL_get_issuer(crl);
  // The CRL Number (RFC 5280 5.2.3, monotonic per issuer) orders CRLs:
  // lastUpdate has a one-second resolution and is not remembered.
  const std::string number = CrlNumberHex(crl);
  if (number.empty())
    return bad(absl::StrCat("CRL ", n, " (issuer ", NameText(issuer),
                            ") has no valid CRL Number extension (needed to refuse "
                            "older CRLs; deploy/gen-certs.sh writes one)"));
  const std::string last = TimeKey(X509_CRL_get0_lastUpdate(crl));
  if (last.empty()) return bad("a CRL has no valid lastUpdate");
  if (last > snap.newest_last_update) snap.newest_last_update = last;
  const std::string next = TimeKey(X509_CRL_get0_nextUpdate(crl));
  if (!next.empty() && next < now_key)
    KMPC_LOG(WARNING) << "CRL file " << crl_path_ << ": CRL " << n
                      << " expired (nextUpdate " << next
                      << "); its revocations stay in force, issue a fresh one";
  // Issuers are compared as X509_NAME_cmp does (canonical encoding), here
  // and in IsRevoked: the same name may be encoded differently in a CRL
  // and in a certificate.
  IssuerCrl* entry = nullptr;
  for (IssuerCrl& e : snap.crls)
    if (e.ca_key == ca_key && X509_NAME_cmp(e.issuer.get(), issuer) == 0) entry = &e;
  if (entry == nullptr) {
    std::shared_ptr<X509_NAME> copy = NameCopy(issuer);
    if (copy == nullptr) return bad("cannot copy a CRL's issuer name");
    snap.crls.push_back({std::move(copy), ca_key, number, {}});
    entry = &snap.crls.back();
  }
  if (NumberLess(entry->number, number)) entry->number = number;
  std::set<std::string>& serials = entry->serials;
  STACK_OF(X509_REVOKED)* revoked = X509_CRL_get_REVOKED(crl);
  for (int i = 0; i < sk_X509_REVOKED_num(revoked); ++i) {
    const X509_REVOKED* r = sk_X509_REVOKED_value(revoked, i);
    std::string s = SerialHex(X509_REVOKED_get0_serialNumber(r));
    if (s.empty()) return bad("a revoked entry has an unreadable serial");
    if (serials.insert(s).second) ++snap.count;
  }
  return absl::OkStatus();
}

absl::Status RevocationList::LoadLocked(bool forced) {
  struct stat st {};
  std::string pem;
  // stat before reading: a change during the read is seen at the next poll.
  if (stat(crl_path_.c_str(), &st) != 0 || !ReadWholeFile(crl_path_, &pem))
    return absl::InvalidArgumentError(
        absl::StrCat("CRL file ", crl_path_, ": cannot read it: ", strerror(errno)));
  seen_ = st;
  auto snap = Parse(pem);
  if (!snap.ok()) return snap.status();
  // Rollback: per CA, never a lower CRL Number than one accepted before
  // (in this run or, through state_path_, an earlier one).
  const std::string recorded =
      state_path_.empty() ? "" : absl::StrCat(" (recorded in ", state_path_, ")");
  for (const IssuerCrl& e : (*snap)->crls) {
    auto it = highest_.find(e.ca_key);
    if (it != highest_.end() && NumberLess(e.number, it->second))
      return absl::InvalidArgumentError(absl::StrCat(
          "CRL file ", crl_path_, ": the CRL of ", NameText(e.issuer.get()),
          " has CRL Number ", e.number, ", lower than ", it->second,
          " accepted before", recorded,
          ": an older CRL (rollback?); not loaded. Install the newest CRL or issue a "
          "new one (deploy/gen-certs.sh DIR --crl)"));
  }
  for (const auto& [key, number] : highest_) {
    auto name = (*snap)->ca_names.find(key);
    if (name == (*snap)->ca_names.end()) continue;  // no longer a CA of --ca
    bool present = false;
    for (const IssuerCrl& e : (*snap)->crls) present = present || e.ca_key == key;
    if (!present)
      return absl::InvalidArgumentError(absl::StrCat(
          "CRL file ", crl_path_, ": holds no CRL of ", name->second,
          ", whose CRL Number ", number, " was accepted before", recorded,
          "; not loaded"));
  }
  std::shared_ptr<const Snapshot> loaded = *std::move(snap);
  bool first;
  {
    absl::MutexLock lock(&mu_);
    first = current_ == nullptr;
    current_ = loaded;
  }
  bool raised = false;
  for (const IssuerCrl& e : loaded->crls) {
    std::string& h = highest_[e.ca_key];
    if (h.empty() || NumberLess(h, e.number)) {
      h = e.number;
      raised = true;
    }
  }
  for (const std::string& ca : loaded->cas_without_crl)
    KMPC_LOG(WARNING) << "CRL file " << crl_path_ << " holds no CRL of the CA " << ca
                      << ": certificates it issued are NOT checked for revocation";
  // The state first: once "loaded" or "reloaded" is logged, a restart
  // refuses a CRL older than this one (the tests wait for that line).
  if (raised) {
    if (absl::Status st = WriteStateLocked(); !st.ok())
      KMPC_LOG(ERROR) << "CRL state " << state_path_
                      << ": cannot record the accepted CRL Numbers (" << st.message()
                      << "); the CRL is in force, but after a restart an older CRL "
                         "would not be recognised as older";
  }
  KMPC_LOG(INFO) << (first ? "loaded" : forced ? "reloaded" : "reloaded (file changed)")
                 << " CRL " << crl_path_ << ": " << loaded->count
                 << " revoked certificate(s), lastUpdate "
                 << loaded->newest_last_update;
  return absl::OkStatus();
}

absl::Status RevocationList::Reload() {
  absl::MutexLock load(&load_mu_);
  {
    absl::MutexLock lock(&mu_);
    last_poll_ = absl::Now();
  }
  absl::Status st = LoadLocked(true);
  if (!st.ok())
    KMPC_LOG(ERROR) << st.message() << "; the CRL loaded before stays in force";
  return st;
}

// The file's identity changed since the last attempt: load it.
void RevocationList::PollLocked() {
  struct stat st {};
  if (stat(crl_path_.c_str(), &st) != 0) {
    // Removed or moved away: keep enforcing what was loaded (log once).
    if (seen_.st_ino != 0)
      KMPC_LOG(ERROR) << "CRL file " << crl_path_ << ": " << strerror(errno)
                      << "; the CRL loaded before stays in force";
    seen_ = {};
    return;
  }
  if (SameFile(st, seen_)) return;
  if (absl::Status s = LoadLocked(false); !s.ok())
    KMPC_LOG(ERROR) << s.message() << "; the CRL loaded before stays in force";
}

bool RevocationList::IsRevoked(const X509_NAME* issuer, const std::string& serial_hex) {
  std::shared_ptr<const Snapshot> snap;
  bool poll = false;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = absl::Now();
    if (now - last_poll_ >= poll_) {
      last_poll_ = now;
      poll = true;
    }
    snap = current_;
  }
  // One caller per poll interval looks at the file (and loads it when it
  // changed) without holding mu_; if a load is already running (SIGHUP),
  // the loaded list answers meanwhile.
  if (poll && load_mu_.TryLock()) {
    PollLocked();
    load_mu_.Unlock();
    absl::MutexLock lock(&mu_);
    snap = current_;
  }
  if (issuer == nullptr) return true;  // cannot be checked: refuse
  for (const IssuerCrl& e : snap->crls)
    if (X509_NAME_cmp(e.issuer.get(), issuer) == 0 && e.serials.count(serial_hex) > 0)
      return true;
  return false;
}

absl::Status RevocationList::CheckPeer(X509* cert) {
  if (cert == nullptr) return absl::UnauthenticatedError("no peer certificate");
  const std::string serial = SerialHex(X509_get0_serialNumber(cert));
  if (!IsRevoked(X509_get_issuer_name(cert), serial)) return absl::OkStatus();
  std::string subject = NameText(X509_get_subject_name(cert));
  if (ShouldLogDenial(absl::StrCat("ring|", serial)))
    KMPC_LOG(WARNING) << "ring: refused peer " << subject << " (serial " << serial
                      << "): certificate revoked";
  return absl::UnauthenticatedError(
      absl::StrCat("ring peer certificate ", subject, " has been revoked"));
}

size_t RevocationList::revoked_count() {
  absl::MutexLock lock(&mu_);
  return current_->count;
}

// ------------------------------------------------------------ policy

absl::StatusOr<ClientPolicy> ParseClientPolicy(absl::string_view list,
                                               std::shared_ptr<RevocationList> crl) {
  ClientPolicy p;
  p.crl = std::move(crl);
  for (absl::string_view e : absl::StrSplit(list, ',', absl::SkipWhitespace())) {
    e = absl::StripAsciiWhitespace(e);
    if (absl::StartsWithIgnoreCase(e, "sha256:")) {
      const std::optional<Sha256> pin = net::ParseSha256Hex(e, "sha256:");
      if (!pin)
        return absl::InvalidArgumentError(absl::StrCat(
            "certificate pin '", e, "' is not sha256: followed by 32 bytes of hex "
            "(openssl x509 -noout -fingerprint -sha256 -in CERT)"));
      p.pins.push_back(*pin);
    } else if (absl::StrContains(e, ":")) {
      return absl::InvalidArgumentError(absl::StrCat(
          "allow-list entry '", e, "': pins are written sha256:<hex>"));
    } else {
      p.names.emplace_back(e);
    }
  }
  if (p.names.empty())
    return absl::InvalidArgumentError(
        "an allow-list needs at least one certificate CN (pins only narrow it)");
  return p;
}

absl::StatusOr<std::string> CertificateSha256Hex(const std::string& pem) {
  BioPtr bio = MemBio(pem);
  X509Ptr cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  ERR_clear_error();
  if (cert == nullptr) return absl::InvalidArgumentError("not a PEM certificate");
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  if (X509_digest(cert.get(), EVP_sha256(), md, &n) != 1 || n != 32)
    return absl::InternalError("cannot hash the certificate");
  return absl::BytesToHexString(absl::string_view(reinterpret_cast<char*>(md), n));
}

absl::Status AuthorizePeer(const grpc::AuthContext* ac, const ClientPolicy& policy,
                           const char* service, const std::string& peer) {
  if (ac == nullptr || !ac->IsPeerAuthenticated())
    return absl::UnauthenticatedError("a client certificate is required");
  PeerCert pc;
  bool name_ok = false;
  for (const grpc::string_ref& v : ac->FindPropertyValues("x509_common_name")) {
    pc.cn.assign(v.data(), v.size());
    for (const std::string& a : policy.names) name_ok = name_ok || pc.cn == a;
  }
  const bool need_cert = policy.crl != nullptr || !policy.pins.empty();
  Sha256 fp{};
  if (need_cert) {
    for (const grpc::string_ref& v :
         ac->FindPropertyValues(GRPC_X509_PEM_CERT_PROPERTY_NAME)) {
      pc.facts = FactsOf(absl::string_view(v.data(), v.size()));
      break;
    }
    if (pc.facts == nullptr) {
      KMPC_LOG(WARNING) << service << ": denied " << peer << " (CN '" << pc.cn
                        << "'): its certificate is not available to check";
      return absl::UnauthenticatedError("the client certificate cannot be checked");
    }
    fp = pc.facts->sha256;
    pc.serial_hex = pc.facts->serial_hex;
    pc.sha256_hex = pc.facts->sha256_hex;
  }
  auto deny = [&](absl::Status st, const char* reason) {
    if (ShouldLogDenial(absl::StrCat(service, "|", pc.cn, "|", pc.sha256_hex, "|", reason)))
      KMPC_LOG(WARNING) << service << ": denied " << peer << " (CN '" << pc.cn
                        << "'" << (need_cert ? ", serial " + pc.serial_hex : "")
                        << (need_cert ? ", sha256 " + pc.sha256_hex : "")
                        << "): " << reason;
    return st;
  };
  if (policy.crl != nullptr &&
      policy.crl->IsRevoked(pc.facts->issuer.get(), pc.serial_hex))
    return deny(absl::UnauthenticatedError("the client certificate has been revoked"),
                "certificate revoked");
  if (!name_ok)
    return deny(absl::PermissionDeniedError(
                    absl::StrCat("client '", pc.cn, "' may not call ", service)),
                "CN not in the allow-list");
  if (!policy.pins.empty()) {
    bool pinned = false;
    for (const Sha256& p : policy.pins) pinned = pinned || p == fp;
    if (!pinned)
      return deny(absl::PermissionDeniedError(absl::StrCat(
                      "client '", pc.cn, "' may not call ", service,
                      ": its certificate is not one of the pinned ones")),
                  "certificate fingerprint not pinned");
  }
  return absl::OkStatus();
}

absl::Status Authorize(grpc::ServerContext* ctx, const ClientPolicy& policy,
                       const char* service) {
  std::shared_ptr<const grpc::AuthContext> ac = ctx->auth_context();
  return AuthorizePeer(ac.get(), policy, service, ctx->peer());
}

}  // namespace kmpc::service
