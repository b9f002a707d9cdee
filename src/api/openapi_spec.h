#pragma once

// The OpenAPI 3.1 document of `deepinfer serve`'s routes, served at GET /openapi.json.
//
// The document is kept by hand in src/api/openapi.json and compiled in at build time
// (cmake/embed_text.cmake), so the binary serves the file as it was built. openapi_test checks
// its paths and methods against ApiServer::Routes(), and tests/e2e/test_openapi.py checks a
// running server's answers against it with schemathesis.

#include <string_view>

namespace deepinfer::api {

// The bytes of src/api/openapi.json (a JSON object).
std::string_view OpenApiSpec();

}  // namespace deepinfer::api
