"""ROS 2 adapters (layer 6 of DESIGN.md §3): the controller node and message conversions.

Importing this package needs rclpy and the message packages; the core does not.
"""
