// The one source of the targets that build the precompiled headers (cmake/deepinfer.cmake,
// di_define_pch_targets); the headers are all they compile.
