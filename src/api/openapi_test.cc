// GET /openapi.json (api/openapi_spec.h) against the routes ApiServer dispatches on: the document
// lists exactly ApiServer::Routes(), every operation has its request, success and error schemas,
// and each documented path reaches its route. tests/e2e/test_openapi.py checks a running server's
// answers against the same document.

#include "api/openapi_spec.h"

#include <cctype>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "api/server.h"
#include "api/testing/capture_writer.h"
#include "gtest/gtest.h"
#include "http/errors.h"
#include "util/json.h"

namespace deepinfer::api {
namespace {

using MethodPath = std::pair<std::string, std::string>;

// The HTTP methods an OpenAPI path item can hold.
constexpr const char* kOperationKeys[] = {"get",  "put",     "post",  "delete",
                                          "head", "options", "patch", "trace"};

using testing::CaptureWriter;

util::Json Spec() {
  auto spec = util::ParseJson(OpenApiSpec());
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *spec : util::Json::object();
}

// `node` with a local "$ref" followed (one hop is all the document uses at the places checked).
const util::Json& Resolve(const util::Json& spec, const util::Json& node) {
  auto ref = node.find("$ref");
  if (ref == node.end()) return node;
  std::string pointer = ref->get<std::string>();
  EXPECT_EQ(pointer.rfind("#/", 0), 0u) << pointer;
  return spec.at(util::Json::json_pointer(pointer.substr(1)));
}

// The name of the component schema `node` refers to ("" when inline).
std::string RefName(const util::Json& node) {
  auto ref = node.find("$ref");
  if (ref == node.end()) return "";
  std::string pointer = ref->get<std::string>();
  return pointer.substr(pointer.rfind('/') + 1);
}

CaptureWriter Call(ApiServer& server, const std::string& method, const std::string& path) {
  http::Request request;
  request.method = method;
  request.target = request.path = path;
  CaptureWriter writer;
  server.Handle(request, writer);
  return writer;
}

TEST(OpenApiTest, DocumentIsAnOpenApi31Object) {
  util::Json spec = Spec();
  ASSERT_TRUE(spec.is_object());
  EXPECT_EQ(spec.value("openapi", "").rfind("3.1.", 0), 0u);
  EXPECT_TRUE(spec["info"]["title"].is_string());
  EXPECT_TRUE(spec["info"]["version"].is_string());
}

TEST(OpenApiTest, PathsAndMethodsAreTheServersRoutes) {
  util::Json spec = Spec();
  std::set<MethodPath> documented;
  for (const auto& [path, item] : spec["paths"].items()) {
    for (const char* key : kOperationKeys) {
      if (!item.contains(key)) continue;
      std::string method = key;
      for (char& c : method) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      documented.insert({method, path});
    }
  }
  std::set<MethodPath> served;
  for (const ApiServer::Route& r : ApiServer::Routes()) served.insert({r.method, r.path});
  ASSERT_FALSE(served.empty());
  for (const MethodPath& route : served) {
    EXPECT_TRUE(documented.count(route)) << route.first << " " << route.second
                                         << " is served but not in src/api/openapi.json";
  }
  for (const MethodPath& op : documented) {
    EXPECT_TRUE(served.count(op)) << op.first << " " << op.second
                                  << " is documented but not a route of ApiServer";
  }
}

TEST(OpenApiTest, EveryOperationHasRequestSuccessAndErrorSchemas) {
  util::Json spec = Spec();
  for (const auto& [path, item] : spec["paths"].items()) {
    for (const char* key : kOperationKeys) {
      if (!item.contains(key)) continue;
      SCOPED_TRACE(std::string(key) + " " + path);
      const util::Json& op = item[key];
      EXPECT_TRUE(op.contains("operationId"));
      if (std::string(key) == "post") {
        ASSERT_TRUE(op.contains("requestBody"));
        const util::Json& body = op["requestBody"]["content"]["application/json"];
        ASSERT_TRUE(body.contains("schema"));
        EXPECT_TRUE(Resolve(spec, body["schema"]).is_object());
      }
      const util::Json& responses = op["responses"];
      ASSERT_TRUE(responses.contains("200"));
      const util::Json& ok = Resolve(spec, responses["200"]);
      ASSERT_TRUE(ok.contains("content")) << "200 has no content";
      for (const auto& [media_type, content] : ok["content"].items()) {
        EXPECT_TRUE(content.contains("schema")) << media_type;
      }
      // Every error status the server can answer, in the shape it answers on this path
      // (http::ErrorBodyForPath): Anthropic's on /v1/messages paths, OpenAI's elsewhere.
      const std::string shape = http::IsAnthropicPath(path) ? "AnthropicError" : "OpenAIError";
      for (const char* status : {"4XX", "5XX"}) {
        ASSERT_TRUE(responses.contains(status)) << status;
        const util::Json& error = Resolve(spec, responses[status]);
        const util::Json& schema = error["content"]["application/json"]["schema"];
        const bool models_route = path.rfind("/v1/models", 0) == 0;
        if (models_route) {
          // Shared with the Anthropic SDK: its shape for a client that sends anthropic-version.
          ASSERT_TRUE(schema.contains("anyOf")) << status;
          std::set<std::string> names;
          for (const util::Json& s : schema["anyOf"]) names.insert(RefName(s));
          EXPECT_EQ(names, (std::set<std::string>{"OpenAIError", "AnthropicError"})) << status;
        } else {
          EXPECT_EQ(RefName(schema), shape) << status;
        }
      }
    }
  }
  // The two error shapes as src/http/errors.h writes them.
  const util::Json& schemas = spec["components"]["schemas"];
  EXPECT_EQ(schemas["OpenAIError"]["properties"]["error"]["required"],
            util::Json({"message", "type", "param", "code"}));
  EXPECT_EQ(schemas["AnthropicError"]["required"], util::Json({"type", "error"}));
  EXPECT_EQ(schemas["AnthropicError"]["properties"]["error"]["required"],
            util::Json({"type", "message"}));
}

TEST(OpenApiTest, ServedWithoutAModelAndIdenticalToTheSpec) {
  ApiServer server;  // no model yet: the document is still there
  CaptureWriter w = Call(server, "GET", "/openapi.json");
  EXPECT_EQ(w.status(), 200);
  EXPECT_EQ(w.content_type(), "application/json");
  EXPECT_EQ(w.body(), OpenApiSpec());
  EXPECT_EQ(Call(server, "HEAD", "/openapi.json").status(), 200);
  CaptureWriter post = Call(server, "POST", "/openapi.json");
  EXPECT_EQ(post.status(), 405);
}

TEST(OpenApiTest, EveryDocumentedPathReachesItsRoute) {
  // Without a model, a route answers 503 model_loading (or, for /metrics and /openapi.json,
  // 200); a path the router does not know is 404 and a method it does not take is 405, so a
  // documented path spelled differently from the router's fails here.
  util::Json spec = Spec();
  ApiServer server;
  for (const auto& [path, item] : spec["paths"].items()) {
    std::string concrete = path;
    if (size_t brace = concrete.find('{'); brace != std::string::npos) {
      concrete = concrete.substr(0, brace) + "some-id";
    }
    for (const char* key : kOperationKeys) {
      if (!item.contains(key)) continue;
      std::string method = key;
      for (char& c : method) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      CaptureWriter w = Call(server, method, concrete);
      EXPECT_TRUE(w.status() == 200 || w.status() == 503)
          << method << " " << concrete << ": " << w.status() << " " << w.body();
      CaptureWriter wrong = Call(server, method == "GET" ? "DELETE" : "GET", concrete);
      EXPECT_EQ(wrong.status(), 405) << concrete;
      EXPECT_EQ(wrong.Header("Allow"), method == "GET" ? "GET, HEAD" : method) << concrete;
    }
  }
}

}  // namespace
}  // namespace deepinfer::api
