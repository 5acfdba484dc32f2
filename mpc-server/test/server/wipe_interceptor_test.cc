// The KeyOps responses' share bytes are wiped once gRPC has serialized
// them (service/wipe_interceptor.h): the client still receives them, the
// handler's response object holds zeros afterwards, and the serialized
// copy is zero when its slice is released.
#include "service/wipe_interceptor.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kmpc.grpc.pb.h"

namespace kmpc::service {
namespace {

namespace pb = ::kmpc::v1;

// 200 non-zero bytes: what a handler puts in a share field.
const std::string kShares(200, '\x5a');

bool AllZero(absl::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c == 0; });
}

// Fills each response's share field and answers OK.
class FillingService : public pb::KeyOps::Service {
 public:
  grpc::Status Run(grpc::ServerContext*, const pb::RunRequest*,
                   pb::RunResponse* r) override {
    r->set_shares(kShares);
    return grpc::Status::OK;
  }
  grpc::Status Sign(grpc::ServerContext*, const pb::SignRequest*,
                    pb::SignResponse* r) override {
    r->set_tag_shares(kShares);
    return grpc::Status::OK;
  }
  grpc::Status Finalize(grpc::ServerContext*, const pb::FinalizeRequest*,
                        pb::FinalizeResponse* r) override {
    r->set_tags(kShares);
    return grpc::Status::OK;
  }
};

class Recorder : public WipeObserver {
 public:
  void MessageWiped(absl::string_view method, absl::string_view field) override {
    std::lock_guard<std::mutex> l(mu_);
    wiped.push_back(std::string(method));
    fields_zero = fields_zero && field.size() == kShares.size() && AllZero(field);
  }
  void SerializedReleased(const uint8_t* data, size_t n) override {
    std::lock_guard<std::mutex> l(mu_);
    ++released;
    released_zero =
        released_zero && n > kShares.size() &&
        AllZero(absl::string_view(reinterpret_cast<const char*>(data), n));
  }
  std::vector<std::string> Wiped() {
    std::lock_guard<std::mutex> l(mu_);
    return wiped;
  }
  int Released() {
    std::lock_guard<std::mutex> l(mu_);
    return released;
  }

  std::mutex mu_;
  std::vector<std::string> wiped;
  bool fields_zero = true;
  int released = 0;
  bool released_zero = true;
};

TEST(WipeInterceptor, SharesReachTheClientAndAreWipedOnTheServer) {
  Recorder rec;
  SetWipeObserverForTesting(&rec);
  FillingService svc;
  grpc::ServerBuilder b;
  b.RegisterService(&svc);
  b.experimental().SetInterceptorCreators(WipeSharesInterceptors());
  std::unique_ptr<grpc::Server> server = b.BuildAndStart();
  ASSERT_NE(server, nullptr);
  auto stub = pb::KeyOps::NewStub(server->InProcessChannel(grpc::ChannelArguments()));
  {
    grpc::ClientContext c1, c2, c3;
    pb::RunResponse run;
    pb::FinalizeResponse fin;
    pb::SignResponse sign;
    ASSERT_TRUE(stub->Run(&c1, pb::RunRequest(), &run).ok());
    ASSERT_TRUE(stub->Finalize(&c2, pb::FinalizeRequest(), &fin).ok());
    ASSERT_TRUE(stub->Sign(&c3, pb::SignRequest(), &sign).ok());
    // Wiped after serialization: the client got the bytes.
    EXPECT_EQ(run.shares(), kShares);
    EXPECT_EQ(fin.tags(), kShares);
    EXPECT_EQ(sign.tag_shares(), kShares);
  }
  server->Shutdown();
  server->Wait();
  EXPECT_EQ(rec.Wiped(), (std::vector<std::string>{"/kmpc.v1.KeyOps/Run",
                                                    "/kmpc.v1.KeyOps/Finalize",
                                                    "/kmpc.v1.KeyOps/Sign"}));
  EXPECT_TRUE(rec.fields_zero);
  // Every serialized response went through a wiping slice, zero at release.
  EXPECT_EQ(rec.Released(), 3);
  EXPECT_TRUE(rec.released_zero);
  SetWipeObserverForTesting(nullptr);
}

// A response that is not sent: WipeResponseShares (keyops_service.cc, Serve)
// wipes its share field; any other message is left alone.
TEST(WipeInterceptor, WipeResponseSharesByType) {
  pb::SignResponse s;
  s.set_tag_shares(kShares);
  const std::string* f = WipeResponseShares(&s);
  ASSERT_EQ(f, &s.tag_shares());
  EXPECT_EQ(s.tag_shares().size(), kShares.size());
  EXPECT_TRUE(AllZero(s.tag_shares()));
  pb::RunRequest other;
  other.set_data_shares(kShares);
  EXPECT_EQ(WipeResponseShares(&other), nullptr);
  EXPECT_EQ(other.data_shares(), kShares);
}

}  // namespace
}  // namespace kmpc::service
