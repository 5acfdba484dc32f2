#include "admin/kdb_rewrite.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <poll.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <utility>
#include <vector>

// com_err.h first, as C (kdb.cc says why).
extern "C" {
#include <com_err.h>
}
#include <krb5/krb5.h>
extern "C" {
#include <kdb.h>
}
#include <kadm5/admin.h>
#include <profile.h>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "admin/kdb_profile.h"
#include "admin/rewrite_due.h"

extern char** environ;

// libkrb5's file lock, which libkdb5 takes on the update log (lock_ulog):
// exported (lib/krb5/libkrb5.exports) but declared only in the internal
// k5-int.h, as are its modes.
extern "C" krb5_error_code krb5_lock_file(krb5_context, int, int);
constexpr int kLockExclusive = 0x0002;  // KRB5_LOCKMODE_EXCLUSIVE
constexpr int kLockUnlock = 0x0008;     // KRB5_LOCKMODE_UNLOCK

namespace kmpc::admin {
namespace {

// The update log's layout, MIT krb5 1.21 src/include/kdb_log.h and
// iprop.h (not installed): a header, then ulogentries blocks of kdb_block
// bytes, the entry of serial number s in block (s - 1) % ulogentries,
// each an entry header and kdb_entry_size bytes of XDR.
struct UlogTime {
  uint32_t seconds, useconds;
};
struct UlogHeader {  // kdb_hlog_t
  uint32_t kdb_hmagic;
  uint16_t db_version_num;
  uint32_t kdb_num;
  UlogTime kdb_first_time, kdb_last_time;
  uint32_t kdb_first_sno, kdb_last_sno;
  uint16_t kdb_state, kdb_block;
};
struct UlogEntryHeader {  // kdb_ent_header_t
  uint32_t kdb_umagic, kdb_entry_sno;
  UlogTime kdb_time;
  int32_t kdb_commit;  // bool_t
  uint32_t kdb_entry_size;
  uint8_t entry_data[4];
};
static_assert(sizeof(UlogHeader) == 40 && sizeof(UlogEntryHeader) == 28,
              "the update log's layout differs from MIT's kdb_log.h");
constexpr uint32_t kUlogHeaderMagic = 0x6662323;  // KDB_ULOG_HDR_MAGIC

std::string Errno(const std::string& what) {
  return absl::StrCat(what, ": ", std::strerror(errno));
}

// Exact reads and writes at an offset.
bool PreadAll(int fd, void* buf, size_t n, off_t off) {
  return pread(fd, buf, n, off) == static_cast<ssize_t>(n);
}
bool WriteAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// Zeroes [from, to) of fd.
bool ZeroRange(int fd, off_t from, off_t to) {
  static const char zero[65536] = {};
  while (from < to) {
    size_t n = static_cast<size_t>(std::min<off_t>(to - from, sizeof(zero)));
    ssize_t w = pwrite(fd, zero, n, from);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    from += w;
  }
  return true;
}

// Counts the lines of a dump that begin with "princ\t" (one per principal,
// kadmin/dbutil/dump.c), fed in pieces.
struct PrincLines {
  static constexpr char kPrefix[] = "princ\t";
  size_t count = 0;
  size_t matched = 0;
  bool in_prefix = true;
  char last = '\n';
  void Feed(const char* p, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      const char c = p[i];
      if (in_prefix) {
        if (c == kPrefix[matched]) {
          if (++matched == sizeof(kPrefix) - 1) {
            ++count;
            in_prefix = false;
          }
        } else {
          in_prefix = false;
        }
      }
      if (c == '\n') {
        in_prefix = true;
        matched = 0;
      }
    }
    if (n > 0) last = p[n - 1];
  }
};

// The kdb5_util of kmpc-admin's krb5 prefix (admin.cmake), whose libkdb5
// reads the KDB kmpc-admin wrote.
const char* Kdb5Util() { return KMPC_DEFAULT_KDB5_UTIL; }

// A child's output: stdout copied to out_fd (counted in *lines), or, with
// out_fd -1, kept in *msgs with stderr. False when copying failed.
bool Drain(int out_pipe, int err_pipe, int out_fd, PrincLines* lines, std::string* msgs) {
  bool ok = true;
  pollfd fds[2] = {{out_pipe, POLLIN, 0}, {err_pipe, POLLIN, 0}};
  char buf[65536];
  while (fds[0].fd >= 0 || fds[1].fd >= 0) {
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      ssize_t n = read(fds[i].fd, buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        close(fds[i].fd);
        fds[i].fd = -1;
        continue;
      }
      if (i == 0 && out_fd >= 0) {
        lines->Feed(buf, static_cast<size_t>(n));
        ok = WriteAll(out_fd, buf, static_cast<size_t>(n)) && ok;
      } else if (msgs->size() < 8192) {
        msgs->append(buf, static_cast<size_t>(n));
      }
    }
  }
  OPENSSL_cleanse(buf, sizeof(buf));  // a dump's keys are master-key encrypted
  return ok;
}

// Runs the prefix's kdb5_util -r REALM ARGS, stdin from in_fd (-1:
// /dev/null), stdout to out_fd (Drain); its messages in *msgs. OK when it
// exited 0 and its output was all copied.
absl::Status RunKdb5Util(const std::string& realm, const std::vector<std::string>& args,
                         int in_fd, int out_fd, PrincLines* lines, std::string* msgs) {
  std::vector<std::string> argv_s = {Kdb5Util(), "-r", realm};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& s : argv_s) argv.push_back(s.data());
  argv.push_back(nullptr);
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0) return absl::InternalError(Errno("pipe"));
  if (pipe2(err, O_CLOEXEC) != 0) {
    close(out[0]);
    close(out[1]);
    return absl::InternalError(Errno("pipe"));
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  if (in_fd >= 0) posix_spawn_file_actions_adddup2(&fa, in_fd, 0);
  else posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_adddup2(&fa, err[1], 2);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  close(out[1]);
  close(err[1]);
  if (rc != 0) {
    close(out[0]);
    close(err[0]);
    return absl::FailedPreconditionError(
        absl::StrCat("cannot run ", argv[0], ": ", std::strerror(rc)));
  }
  const bool copied = Drain(out[0], err[0], out_fd, lines, msgs);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  const std::string what = absl::StrCat("kdb5_util ", args[0]);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return absl::InternalError(
        absl::StrCat(what, " failed: ", absl::StripAsciiWhitespace(*msgs)));
  if (!copied) return absl::InternalError(Errno(what + ": writing its output"));
  return absl::OkStatus();
}

// An unnamed file (O_TMPFILE; else a name unlinked at once), 0600, in dir.
absl::StatusOr<int> PrivateTempFile(const std::string& dir) {
  int fd = open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd >= 0) return fd;
  std::string name = dir + "/.kmpc-kdb-rewrite-XXXXXX";
  fd = mkostemp(name.data(), O_CLOEXEC);  // mode 0600
  if (fd < 0) return absl::FailedPreconditionError(Errno("a temporary file in " + dir));
  unlink(name.c_str());
  return fd;
}

// Overwrites the temporary dump with zeros and closes it.
void WipeAndClose(int fd) {
  struct stat st;
  if (fstat(fd, &st) == 0 && ZeroRange(fd, 0, st.st_size)) fsync(fd);
  close(fd);
}

absl::StatusOr<UlogHeader> ReadUlogHeader(int fd) {
  UlogHeader h;
  if (!PreadAll(fd, &h, sizeof(h), 0)) return absl::InternalError(Errno("reading the update log"));
  if (h.kdb_hmagic != kUlogHeaderMagic)
    return absl::FailedPreconditionError("the update log's header is not MIT's");
  return h;
}

// Which blocks hold live entries, with how many bytes of each are in use
// (entry header and XDR); 0: none.
std::vector<size_t> LiveBytes(int fd, const UlogHeader& h, uint32_t entries) {
  std::vector<size_t> live(entries, 0);
  const uint32_t n = std::min(h.kdb_num, entries);
  for (uint32_t k = 0; k < n; ++k) {
    const uint32_t sno = h.kdb_first_sno + k;
    const uint32_t slot = (sno - 1) % entries;
    UlogEntryHeader e;
    const off_t at = sizeof(UlogHeader) + static_cast<off_t>(slot) * h.kdb_block;
    size_t used = sizeof(UlogEntryHeader);
    if (PreadAll(fd, &e, sizeof(e), at) && e.kdb_entry_sno == sno)
      used = std::max(used, offsetof(UlogEntryHeader, entry_data) + e.kdb_entry_size);
    live[slot] = std::min<size_t>(used, h.kdb_block);
  }
  return live;
}

// Zeroes every byte of the update log that no live entry uses (the old
// entries a reset header leaves), under the log's lock (lock_ulog).
absl::Status ScrubUlog(const std::string& path, uint32_t entries) {
  int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return absl::InternalError(Errno("opening " + path));
  krb5_context ctx = nullptr;
  krb5_error_code ret = krb5_init_context(&ctx);
  if (ret == 0) ret = krb5_lock_file(ctx, fd, kLockExclusive);
  absl::Status st;
  if (ret != 0) {
    st = absl::InternalError(absl::StrCat("locking ", path, ": ", error_message(ret)));
  } else if (auto h = ReadUlogHeader(fd); !h.ok()) {
    st = h.status();
  } else if (h->kdb_block < sizeof(UlogEntryHeader) || entries == 0) {
    st = absl::FailedPreconditionError(path + ": an unexpected block size");
  } else {
    const std::vector<size_t> live = LiveBytes(fd, *h, entries);
    bool ok = true;
    for (uint32_t i = 0; i < entries && ok; ++i) {
      const off_t at = sizeof(UlogHeader) + static_cast<off_t>(i) * h->kdb_block;
      ok = ZeroRange(fd, at + static_cast<off_t>(live[i]), at + h->kdb_block);
    }
    struct stat sb;
    const off_t end = sizeof(UlogHeader) + static_cast<off_t>(entries) * h->kdb_block;
    if (ok && fstat(fd, &sb) == 0 && sb.st_size > end) ok = ZeroRange(fd, end, sb.st_size);
    if (!ok || fsync(fd) != 0) st = absl::InternalError(Errno("zeroing " + path));
  }
  if (ctx != nullptr) {
    krb5_lock_file(ctx, fd, kLockUnlock);
    krb5_free_context(ctx);
  }
  close(fd);
  return st;
}

// The update log's last serial number and time (0s when iprop is off).
absl::StatusOr<std::pair<uint32_t, uint64_t>> UlogLast(const KdbFiles& f) {
  if (!f.iprop) return std::make_pair(0u, uint64_t{0});
  int fd = open(f.ulog.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::InternalError(Errno("opening " + f.ulog));
  auto h = ReadUlogHeader(fd);
  close(fd);
  if (!h.ok()) return h.status();
  return std::make_pair(h->kdb_last_sno, (uint64_t{h->kdb_last_time.seconds} << 32) |
                                             h->kdb_last_time.useconds);
}

std::string DirOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// `kdb5_util dump` into fd; the number of principals it holds.
absl::StatusOr<size_t> DumpInto(const KdbFiles& f, int fd) {
  PrincLines lines;
  std::string msgs;
  absl::Status st = RunKdb5Util(f.realm, {"dump"}, -1, fd, &lines, &msgs);
  if (!st.ok()) return st;
  if (lines.last != '\n')
    return absl::InternalError("kdb5_util dump: its output ends inside a record");
  return lines.count;
}

// `kdb5_util load` of the dump in fd. The files it puts in place (the
// principal database and its policy database, plugins/kdb/db2 ctx_promote)
// are its own user's, mode 0600: they get the replaced files' owner and mode
// back, so that a KDC and kadmind running as another user read them. The
// replaced database file is zeroed once no name refers to it (*zeroed).
absl::Status LoadDump(const KdbFiles& f, int fd, bool* zeroed) {
  const std::string files[2] = {f.dbname, f.dbname + ".kadm5"};
  struct stat before[2];
  bool had[2];
  for (int i = 0; i < 2; ++i) had[i] = stat(files[i].c_str(), &before[i]) == 0;
  const int old_db = open(f.dbname.c_str(), O_RDWR | O_CLOEXEC);
  PrincLines unused;
  std::string msgs;
  absl::Status st = RunKdb5Util(f.realm, {"load", "/dev/stdin"}, fd, -1, &unused, &msgs);
  struct stat sb;
  *zeroed = st.ok() && old_db >= 0 && fstat(old_db, &sb) == 0 && sb.st_nlink == 0 &&
            ZeroRange(old_db, 0, sb.st_size) && fsync(old_db) == 0;
  if (old_db >= 0) close(old_db);
  if (!st.ok()) return st;
  for (int i = 0; i < 2; ++i)
    if (had[i] && (chown(files[i].c_str(), before[i].st_uid, before[i].st_gid) != 0 ||
                   chmod(files[i].c_str(), before[i].st_mode & 07777) != 0))
      return absl::InternalError(Errno(absl::StrCat(
          "the KDB was rewritten, but giving ", files[i], " its old owner and mode")));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<KdbFiles> FindKdbFiles(const std::string& realm) {
  krb5_context ctx = nullptr;
  krb5_error_code ret = kadm5_init_krb5_context(&ctx);  // krb5.conf and kdc.conf
  if (ret)
    return absl::FailedPreconditionError(
        absl::StrCat("cannot initialize krb5: ", error_message(ret)));
  KdbFiles f;
  f.realm = realm;
  kadm5_config_params in, out;
  std::memset(&in, 0, sizeof(in));
  std::memset(&out, 0, sizeof(out));
  in.mask = KADM5_CONFIG_REALM;
  in.realm = f.realm.data();
  ret = kadm5_get_config_params(ctx, 1, &in, &out);
  if (ret == 0) {
    f.iprop = out.iprop_enabled;
    f.ulog = out.iprop_logfile != nullptr ? out.iprop_logfile : "";
    f.ulog_entries = out.iprop_ulogsize;
    f.dbname = out.dbname != nullptr ? out.dbname : "";
    kadm5_free_config_params(ctx, &out);
  }
  profile_t prof = nullptr;
  if (ret == 0) ret = krb5_get_profile(ctx, &prof);
  if (ret == 0) {
    // The module's database_name before the realm's (kadm5's, above).
    const KdbModuleSettings m = ReadKdbModuleSettings(prof, realm);
    f.library = m.library;
    if (!m.database_name.empty()) f.dbname = m.database_name;
    profile_release(prof);
  }
  std::string err = ret ? error_message(ret) : "";
  krb5_free_context(ctx);
  if (!err.empty()) return absl::InternalError("reading the KDB's configuration: " + err);
  return f;
}

absl::StatusOr<std::string> RewriteKdb(const KdbFiles& f, size_t principals) {
  if (f.dbname.empty()) return absl::FailedPreconditionError("the KDB has no database_name");
  auto before = UlogLast(f);
  if (!before.ok()) return before.status();
  auto fd = PrivateTempFile(DirOf(f.dbname));
  if (!fd.ok()) return fd.status();
  auto dumped = DumpInto(f, *fd);
  absl::Status st = dumped.status();
  if (st.ok() && *dumped != principals)
    st = absl::AbortedError(absl::StrCat("the dump holds ", *dumped, " principals, the "
                                         "KDB listed ", principals, " (changed meanwhile?)"));
  auto after = UlogLast(f);
  if (st.ok() && !after.ok()) st = after.status();
  if (st.ok() && *after != *before)
    st = absl::AbortedError("the KDB changed while it was dumped (the update log moved)");
  if (st.ok() && lseek(*fd, 0, SEEK_SET) != 0) st = absl::InternalError(Errno("rewinding"));
  bool old_zeroed = false;
  if (st.ok()) st = LoadDump(f, *fd, &old_zeroed);
  WipeAndClose(*fd);
  if (!st.ok()) return st;
  std::string ulog_note = old_zeroed ? "; the replaced file zeroed" : "";
  if (f.iprop) {
    if (absl::Status s = ScrubUlog(f.ulog, f.ulog_entries); !s.ok())
      return absl::Status(s.code(), absl::StrCat("the database was rewritten, but ", f.ulog,
                                                 " still holds old entries: ", s.message()));
    absl::StrAppend(&ulog_note, "; ", f.ulog, " reset (replicas get a full resync) and its "
                             "old entries zeroed");
  } else if (struct stat us; !f.ulog.empty() && stat(f.ulog.c_str(), &us) == 0) {
    // Left by iprop once on: nothing maps it, and its entries hold the
    // key data of every change logged then.
    absl::StrAppend(&ulog_note, "; WARNING: ", f.ulog, " is left from when iprop was on "
                    "and still holds the key data it logged: delete it");
  }
  return absl::StrCat("rewrote the KDB into fresh files (kdb5_util dump and load of ",
                      *dumped, " principals, ", f.dbname, ulog_note, ")");
}

// Its lines go to stderr, with kmpc-admin's other diagnostics: share's
// stdout stays one line per principal.
bool RewriteKdbAfterMove(std::unique_ptr<Kdb> kdb, const std::string& why) {
  const std::string realm = kdb->realm();
  auto names = kdb->ListPrincipals();
  kdb.reset();  // closed: the rewrite replaces its files
  absl::StatusOr<KdbFiles> files =
      names.ok() ? FindKdbFiles(realm) : absl::StatusOr<KdbFiles>(names.status());
  const char* w = why.c_str();
  if (files.ok() && files->library != "db2") {
    std::fprintf(stderr,
                 "kmpc-admin: %s: the KDB is not rewritten, its module is %s, not db2: "
                 "its storage may still hold the replaced keys (old records, logs); "
                 "%s (docs/admin-guide.md, \"Old keys after a move\")\n",
                 w, files->library.c_str(),
                 files->library == "kldap"
                     ? "copy the directory's database into a fresh file and remove its "
                       "old logs and the old file"
                     : "rewrite it with that module's own tools");
    return true;
  }
  // Key changes kadmind's dealer noted (admin/rewrite_due.h): those noted
  // before the dump are in the fresh files' count.
  const uint64_t due = files.ok() ? RewriteDueSize(files->dbname) : 0;
  absl::StatusOr<std::string> done =
      files.ok() ? RewriteKdb(*files, names->size()) : files.status();
  if (!done.ok()) {
    std::fprintf(stderr,
                 "kmpc-admin: %s: the KDB was NOT rewritten into fresh files: %s.\n"
                 "kmpc-admin: the key handles are written and the KDB works, but its "
                 "files still hold the replaced keys in their free space: fix the "
                 "cause and run kmpc-admin rewrite-kdb\n",
                 w, std::string(done.status().message()).c_str());
    return false;
  }
  if (absl::Status st = ClearRewriteDue(files->dbname, due); !st.ok())
    std::fprintf(stderr, "kmpc-admin: %s: %s\n", w, std::string(st.message()).c_str());
  std::fprintf(stderr,
               "kmpc-admin: %s: %s\n"
               "kmpc-admin: the old files' disk blocks are freed, not erased, and dumps, "
               "backups and replicas made before still hold the old keys "
               "(docs/admin-guide.md, \"Old keys after a move\")\n",
               w, done->c_str());
  return true;
}

bool ReportRewritesDue(const std::string& realm) {
  absl::StatusOr<KdbFiles> files = FindKdbFiles(realm);
  if (!files.ok() || files->library != "db2") return true;
  absl::StatusOr<std::vector<std::string>> due = RewritesDue(files->dbname);
  if (!due.ok()) {
    std::printf("kdb: %s\n", std::string(due.status().message()).c_str());
    return false;
  }
  if (due->empty()) return true;
  const size_t shown = std::min<size_t>(due->size(), 10);
  std::printf("kdb: kadmin replaced the real keys of %zu principal(s) by key handles "
              "since the KDB was last rewritten (%s%s): its files keep the old keys in "
              "their free space until kmpc-admin rewrite-kdb\n",
              due->size(),
              absl::StrJoin(due->begin(), due->begin() + shown, ", ").c_str(),
              due->size() > shown ? ", ..." : "");
  return false;
}

int RewriteAfterShare(std::unique_ptr<Kdb> kdb, size_t replaced, int rc) {
  if (replaced == 0) return rc;
  const std::string why =
      absl::StrCat("after replacing the real keys of ", replaced, " principal(s) by key "
                   "handles");
  return RewriteKdbAfterMove(std::move(kdb), why) ? rc : 1;
}

}  // namespace kmpc::admin
