// log_sink.hpp -- the milter's names for the core's logging module
// (retryguard/logging/logging.hpp): where retryguard-milter's lines go is decided and
// written there; the filter and the pending store write through a Sink.
#pragma once

#include "retryguard/logging/logging.hpp"

namespace retryguard::milter {

using Severity = logging::Severity;
using LogSink = logging::Sink;

}  // namespace retryguard::milter
