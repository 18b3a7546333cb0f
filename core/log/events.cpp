// events.cpp -- the stable names of event kinds and delivery statuses. These
// names appear in `retryguard events --json` and in docs/events.md; changing one
// breaks every consumer that reads them, so never rename, only add.
#include "retryguard/log/events.hpp"

namespace retryguard {

std::string_view to_string(EventKind kind) noexcept {
    switch (kind) {
        case EventKind::delivery: return "delivery";
        case EventKind::queue_active: return "queue_active";
        case EventKind::queue_removed: return "queue_removed";
        case EventKind::expired: return "expired";
        case EventKind::message_id: return "message_id";
        case EventKind::milter_action: return "milter_action";
        case EventKind::pickup: return "pickup";
        case EventKind::smtpd_client: return "smtpd_client";
        case EventKind::smtpd_action: return "smtpd_action";
        case EventKind::notification: return "notification";
        case EventKind::queue_operation: return "queue_operation";
        case EventKind::connection_problem: return "connection_problem";
        case EventKind::verdict: return "verdict";
        case EventKind::unknown: return "unknown";
    }
    return "unknown";
}

std::string_view to_string(DeliveryStatus status) noexcept {
    switch (status) {
        case DeliveryStatus::none: return "none";
        case DeliveryStatus::sent: return "sent";
        case DeliveryStatus::deferred: return "deferred";
        case DeliveryStatus::bounced: return "bounced";
        case DeliveryStatus::expired: return "expired";
        case DeliveryStatus::undeliverable: return "undeliverable";
    }
    return "none";
}

}  // namespace retryguard
