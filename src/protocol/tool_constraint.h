#pragma once

// Enforced tool choice: a request's tool_choice "required" (Anthropic "any") or a named tool
// becomes a constraint on the answer (constraint/grammar.h), so that the model writes tool calls
// in its encoder's syntax (api/tool_call_parser.h) whose arguments match the tools' parameter
// schemas, and nothing else.
//
// The constraint is an xgrammar structural tag: the format's markers as literal text, each
// call's arguments as that tool's JSON schema (strict: no properties the schema does not name
// unless additionalProperties allows them; a schema without properties admits any object), in
// JSON for the V3 / V3.1 formats and as DSML
// parameters (xgrammar's deepseek_xml and deepseek_v4_1_xml styles) for V3.2, V4 and V4.1.
// The markers are the bytes the encoders render (deepseek_chat.cc, deepseek_dsml_chat.cc), so
// ParseToolCalls reads every output the constraint allows back into the same calls. Whitespace
// inside arguments is limited to one character per gap (a small model otherwise pads).

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "constraint/grammar.h"
#include "protocol/openai_types.h"
#include "protocol/tool_call_parser.h"

namespace deepinfer::api {

// The constraint for `choice` over `tools` (each an OpenAI tools[i] object as JSON text, as
// tokenizer::ChatOptions holds them) in `format`: kRequired allows one or more calls of any
// tool (exactly one when `choice.parallel` is false), kNamed exactly one call of the named tool.
// nullopt for kAuto and kNone, which leave the model free.
// Errors: InvalidArgument "invalid_value" (param tool_choice) when no tools are offered or the
//   named tool is not one of them; "unsupported_value" when `format` is kNone (the model's chat
//   encoder has no tool-call syntax to enforce); "invalid_value" (param tools[i]...) for a tool
//   definition that is not an object with function.name, a name the markers cannot carry (empty,
//   control characters, '"', '<', '>', '`', U+FF5C) or one used twice, and in the DSML formats
//   parameters that are not an object schema or name a property the markers cannot carry.
absl::StatusOr<std::optional<constraint::ConstraintSpec>> ToolChoiceConstraint(
    ToolCallFormat format, const std::vector<std::string>& tools, const ToolChoice& choice);

}  // namespace deepinfer::api
