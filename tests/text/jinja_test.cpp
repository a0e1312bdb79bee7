#include "text/jinja_template.h"
#include <gtest/gtest.h>
namespace mox::jinja { TEST(Jinja, Smoke) { EXPECT_EQ(Template("{{ 1 + 2 }}").render(Value::dict()), "3"); } }
