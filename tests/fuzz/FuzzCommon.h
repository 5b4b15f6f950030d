// What every fuzz target does with its input: bad text is a UserError (the clear error a
// user sees) and is fine; an InternalError or any other exception is a finding, so it
// aborts, and libFuzzer keeps the input.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>

#include "tilefuse/Error.h"

namespace tilefuse::fuzz {

[[noreturn]] inline void finding(const std::string& what) {
  std::fprintf(stderr, "fuzz finding: %s\n", what.c_str());
  std::abort();
}

template <class F>
void expectOnlyUserErrors(F&& body) {
  try {
    body();
  } catch (const UserError&) {
  } catch (const std::exception& e) {
    finding(e.what());
  }
}

}  // namespace tilefuse::fuzz
