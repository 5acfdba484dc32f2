// kmpc-admin's command line (dispatch.h) without a cluster or a KDB: each
// subcommand refuses every option that is not its own (another
// subcommand's included) before anything runs; the documented forms of the
// global options work before and after the subcommand.
#include "admin/dispatch.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

namespace kmpc::admin {
namespace {

Invocation Parse(std::vector<std::string> args) {
  args.insert(args.begin(), "kmpc-admin");
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  return ParseCommandLine(static_cast<int>(argv.size()), argv.data());
}

// A command line each subcommand accepts (after its name).
std::vector<std::string> ValidArgs(const std::string& name) {
  if (name == "share") return {"--randkey", "alice"};
  if (name == "purge-unreferenced") return {"--dry-run"};
  if (name == "refresh") return {"--all"};
  if (name == "drop-user-ctr") return {"--all"};
  if (name == "set-kind") return {"--kind=user", "alice"};
  if (name == "rebuild-party") return {"1"};
  return {};
}

std::set<std::string> AllSubcommandOptions() {
  std::set<std::string> all;
  for (const CommandSpec* spec : CommandTable())
    for (const std::string& o : OptionsOf(spec->name)) all.insert(o);
  return all;
}

TEST(DispatchTest, TableHasEverySubcommand) {
  std::vector<std::string> names;
  for (const CommandSpec* spec : CommandTable()) names.push_back(spec->name);
  EXPECT_EQ(names, (std::vector<std::string>{
                       "share", "status", "purge-unreferenced", "refresh", "rewrite-kdb",
                       "drop-user-ctr", "breaker-reset", "set-kind", "rebuild-party"}));
  EXPECT_EQ(OptionsOf("status"), std::vector<std::string>{"--kdb"});
  EXPECT_TRUE(OptionsOf("rewrite-kdb").empty());
  EXPECT_TRUE(OptionsOf("no-such-command").empty());
}

TEST(DispatchTest, EachSubcommandRunsWithItsOwnOptions) {
  for (const CommandSpec* spec : CommandTable()) {
    std::vector<std::string> args = ValidArgs(spec->name);
    args.insert(args.begin(), spec->name);
    Invocation inv = Parse(args);
    ASSERT_EQ(inv.outcome, Invocation::Outcome::kRun) << spec->name << ": " << inv.error;
    EXPECT_EQ(inv.spec, spec);
    EXPECT_NE(inv.command, nullptr);
  }
}

TEST(DispatchTest, EachSubcommandRefusesEveryOptionNotItsOwn) {
  const std::set<std::string> all = AllSubcommandOptions();
  size_t refused = 0;
  for (const CommandSpec* spec : CommandTable()) {
    const std::vector<std::string> own = OptionsOf(spec->name);
    size_t mine = 0;
    for (const std::string& opt : all) {
      if (std::find(own.begin(), own.end(), opt) != own.end()) continue;
      std::vector<std::string> args = ValidArgs(spec->name);
      args.insert(args.begin(), {spec->name, opt});
      Invocation inv = Parse(args);
      EXPECT_EQ(inv.outcome, Invocation::Outcome::kUsage) << spec->name << " " << opt;
      EXPECT_EQ(inv.command, nullptr);
      EXPECT_NE(inv.error.find(opt), std::string::npos) << inv.error;
      EXPECT_NE(inv.error.find(", not of " + std::string(spec->name)), std::string::npos)
          << inv.error;
      ++mine;
    }
    EXPECT_GT(mine, 0u) << spec->name;  // every subcommand lacks some option
    refused += mine;
  }
  EXPECT_GT(refused, 50u);
}

TEST(DispatchTest, ShareRefusesDryRun) {
  Invocation inv = Parse({"share", "--dry-run", "--randkey", "alice"});
  EXPECT_EQ(inv.outcome, Invocation::Outcome::kUsage);
  EXPECT_EQ(inv.command, nullptr);
  EXPECT_EQ(inv.error,
            "share: --dry-run is an option of purge-unreferenced and drop-user-ctr, "
            "not of share");
  // Before the subcommand's name, after its arguments, with a value: the same.
  for (std::vector<std::string> args :
       {std::vector<std::string>{"--dry-run", "share", "--randkey", "alice"},
        {"share", "--randkey", "alice", "--dry-run"},
        {"share", "--randkey", "--grace-ms=5", "alice"},
        {"share", "--randkey", "--grace-ms", "5", "alice"}}) {
    inv = Parse(args);
    EXPECT_EQ(inv.outcome, Invocation::Outcome::kUsage) << args[1];
    EXPECT_NE(inv.error.find("not of share"), std::string::npos) << inv.error;
  }
}

TEST(DispatchTest, OwnOptionsGoAfterTheSubcommand) {
  Invocation inv = Parse({"--kdb", "status"});
  EXPECT_EQ(inv.outcome, Invocation::Outcome::kUsage);
  EXPECT_EQ(inv.error, "status: --kdb goes after the subcommand's name");
  inv = Parse({"--dry-run", "purge-unreferenced"});
  EXPECT_EQ(inv.error, "purge-unreferenced: --dry-run goes after the subcommand's name");
}

TEST(DispatchTest, UnknownOptionsCommandsAndArguments) {
  Invocation inv = Parse({"share", "--frobnicate", "--randkey", "alice"});
  EXPECT_EQ(inv.outcome, Invocation::Outcome::kUsage);
  EXPECT_EQ(inv.error, "share: unknown option --frobnicate");
  inv = Parse({"frobnicate"});
  EXPECT_EQ(inv.outcome, Invocation::Outcome::kUsage);
  EXPECT_EQ(inv.error, "unknown command frobnicate");
  inv = Parse({});
  EXPECT_EQ(inv.outcome, Invocation::Outcome::kUsage);
  EXPECT_EQ(inv.error, "");
  inv = Parse({"--servers=a:1,b:2,c:3"});
  EXPECT_EQ(inv.outcome, Invocation::Outcome::kUsage);
  EXPECT_EQ(inv.error, "");
  for (const char* name : {"status", "purge-unreferenced", "rewrite-kdb", "breaker-reset"}) {
    std::vector<std::string> args = ValidArgs(name);
    args.insert(args.begin(), name);
    args.push_back("alice");
    inv = Parse(args);
    EXPECT_EQ(inv.outcome, Invocation::Outcome::kUsage) << name;
    EXPECT_EQ(inv.error, std::string(name) + " takes no arguments (alice)");
  }
  inv = Parse({"share", "--randkey", "alice", "--enctype"});
  EXPECT_EQ(inv.outcome, Invocation::Outcome::kUsage);
  EXPECT_EQ(inv.error, "share: --enctype needs a value");
  inv = Parse({"status", "--servers"});
  EXPECT_EQ(inv.outcome, Invocation::Outcome::kUsage);
  EXPECT_EQ(inv.error, "status: --servers needs a value");
  inv = Parse({"--timeout-ms"});
  EXPECT_EQ(inv.outcome, Invocation::Outcome::kUsage);
  EXPECT_EQ(inv.error, "--timeout-ms needs a value");
}

TEST(DispatchTest, GlobalOptionsBeforeAndAfterTheSubcommand) {
  Invocation inv = Parse({"--servers=a:1,b:2,c:3", "--ca", "ca.pem", "-r", "EXAMPLE.ORG",
                          "status", "--kdb", "--timeout-ms=3000", "--cert=c.pem",
                          "--key", "k.pem", "-q", "--config=/x.conf", "--servers2=d:4,e:5,f:6"});
  ASSERT_EQ(inv.outcome, Invocation::Outcome::kRun) << inv.error;
  EXPECT_EQ(inv.spec, &kStatusCommand);
  EXPECT_EQ(inv.global.config, "/x.conf");
  EXPECT_TRUE(inv.global.quiet);
  EXPECT_EQ(inv.global.settings,
            (std::map<std::string, std::string>{{"servers", "a:1,b:2,c:3"},
                                                {"ca", "ca.pem"},
                                                {"realm", "EXAMPLE.ORG"},
                                                {"timeout_ms", "3000"},
                                                {"cert", "c.pem"},
                                                {"key", "k.pem"},
                                                {"servers2", "d:4,e:5,f:6"}}));
  inv = Parse({"--realm=A", "refresh", "--all", "--realm", "B"});
  ASSERT_EQ(inv.outcome, Invocation::Outcome::kRun) << inv.error;
  EXPECT_EQ(inv.global.settings.at("realm"), "B");  // the last one counts
  EXPECT_FALSE(inv.global.quiet);
}

TEST(DispatchTest, ArgumentsNamedLikeSubcommandsAreArguments) {
  Invocation inv = Parse({"share", "--randkey", "status", "refresh"});
  ASSERT_EQ(inv.outcome, Invocation::Outcome::kRun) << inv.error;
  EXPECT_EQ(inv.spec, &kShareCommand);
  inv = Parse({"status", "share"});
  EXPECT_EQ(inv.outcome, Invocation::Outcome::kUsage);
}

TEST(DispatchTest, Help) {
  EXPECT_EQ(Parse({"--help"}).outcome, Invocation::Outcome::kHelp);
  EXPECT_EQ(Parse({"-h"}).outcome, Invocation::Outcome::kHelp);
  EXPECT_EQ(Parse({"share", "--help"}).outcome, Invocation::Outcome::kHelp);
  const std::string usage = UsageText();
  EXPECT_EQ(usage.rfind("usage: kmpc-admin [OPTIONS] share (--password-stdin", 0), 0u);
  for (const CommandSpec* spec : CommandTable())
    EXPECT_NE(usage.find(std::string("kmpc-admin [OPTIONS] ") + spec->name),
              std::string::npos)
        << spec->name;
  EXPECT_NE(usage.find("-r REALM | --realm=REALM"), std::string::npos);
}

}  // namespace
}  // namespace kmpc::admin
