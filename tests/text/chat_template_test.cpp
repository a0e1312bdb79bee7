#include "text/chat_template.h"
#include <gtest/gtest.h>
TEST(Chat, Smoke) { EXPECT_FALSE(mox::text::chatml_template().empty()); }
