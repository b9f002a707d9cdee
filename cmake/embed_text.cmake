# Writes a C++ source defining `std::string_view FUNCTION()` that returns the bytes of INPUT, so
# that a text file kept in the source tree (src/api/openapi.json) is compiled into the binary.
# Run by a custom command: cmake -DINPUT=... -DOUTPUT=... -DHEADER=api/x.h -DNAMESPACE=a::b
#   -DFUNCTION=Name -P embed_text.cmake
file(READ "${INPUT}" DI_EMBED_TEXT)
# A raw string literal ends at its delimiter; a file that holds it cannot be embedded this way.
string(FIND "${DI_EMBED_TEXT}" ")embed\"" DI_EMBED_CLASH)
if(NOT DI_EMBED_CLASH EQUAL -1)
  message(FATAL_ERROR "${INPUT} contains the raw-string delimiter )embed\"")
endif()
file(WRITE "${OUTPUT}"
  "// Generated from ${INPUT} by cmake/embed_text.cmake; edit that file, not this one.\n"
  "#include \"${HEADER}\"\n\n"
  "namespace ${NAMESPACE} {\n\n"
  "std::string_view ${FUNCTION}() {\n"
  "  static constexpr char kText[] = R\"embed(${DI_EMBED_TEXT})embed\";\n"
  "  return std::string_view(kText, sizeof(kText) - 1);\n"
  "}\n\n"
  "}  // namespace ${NAMESPACE}\n")
