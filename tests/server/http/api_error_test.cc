#include "server/http/api_error.h"

#include "gtest/gtest.h"

namespace witcert::http {
namespace {

TEST(ApiError, StatusCodeMapping) {
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kOk), 200);
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kInvalidArgument), 400);
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kOutOfRange), 400);
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kUnauthenticated), 401);
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kPermissionDenied), 403);
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kNotFound), 404);
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kResourceExhausted), 429);
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kUnavailable), 503);
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kDeadlineExceeded), 504);
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kUnimplemented), 501);
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kInternal), 500);
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kDataLoss), 500);
}

TEST(ApiError, EveryErrorCodeMapsToAnErrorStatus) {
  for (int c = 1; c <= 16; ++c) {
    const int http = HttpStatusFor(static_cast<absl::StatusCode>(c));
    EXPECT_GE(http, 400) << c;
    EXPECT_LT(http, 600) << c;
  }
}

TEST(ApiError, ContextLengthExceededCarriesItsCode) {
  ApiError e = ErrorFromStatus(absl::OutOfRangeError("too long"), "messages");
  EXPECT_EQ(e.http_status, 400);
  EXPECT_EQ(e.code, "context_length_exceeded");
  EXPECT_EQ(e.param, "messages");
  EXPECT_EQ(ErrorFromStatus(absl::ResourceExhaustedError("full")).http_status, 429);
  EXPECT_EQ(ErrorFromStatus(absl::UnavailableError("stopping")).type, "service_unavailable");
}

TEST(ApiError, BodyHasOpenAiShapeWithNulls) {
  const nlohmann::json j = nlohmann::json::parse(InvalidRequest("bad").Body());
  ASSERT_TRUE(j.contains("error"));
  EXPECT_EQ(j["error"]["message"], "bad");
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  EXPECT_TRUE(j["error"]["param"].is_null());
  EXPECT_TRUE(j["error"]["code"].is_null());
  const nlohmann::json k = nlohmann::json::parse(InvalidRequest("bad", "top_p").Body());
  EXPECT_EQ(k["error"]["param"], "top_p");
}

TEST(ApiError, DumpReplacesInvalidUtf8) {
  const std::string s = DumpJson(nlohmann::json{{"t", std::string("a\xff")}});
  EXPECT_NO_THROW(nlohmann::json::parse(s));
  EXPECT_NE(s.find("\xef\xbf\xbd"), std::string::npos);  // U+FFFD
}

}  // namespace
}  // namespace witcert::http
