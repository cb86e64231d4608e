// The driver records device activity for one consumer at a time; this hands
// the records to every consumer that wants them (torch.profiler's sessions,
// torch.rbln.explain), and keeps recording on while any of them listens.
#pragma once

#include <vector>

#include "runtime/driver/activity.h"

namespace rbln::activity {

int subscribe();
void unsubscribe(int subscriber);
// The records since the subscriber's last take, once the work queued so far
// has run (a failed kernel's error stays for the program's next synchronize).
std::vector<driver::Activity> take(int subscriber);

}  // namespace rbln::activity
