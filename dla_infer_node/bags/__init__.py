"""rosbag2 MCAP files: reading and writing without ROS (bag_io, bag_meta), and replay / capture over DDS."""
